#!/usr/bin/python3
"""A week of support tickets through baton, with a reviewer who answers every escalation.

The decision log it leaves (var/support-week.db) is what docs/policy-workflow.md replays and
calibrates against: tickets of five kinds (a refund, a password reset, a help-center question, an
address change, a request for a person) and some that need nothing, phrased in many ways and
sometimes mixing two kinds, so that the engine is sure of some and unsure of others. Each ticket
is one turn. What the policy executes runs (nobody checks it); what it escalates goes to a
simulated reviewer who knows what each ticket needed and answers as a person would: runs the
proposed tool when it is right, another one when it is not, or denies when nothing should run.
A share of escalations is left unanswered (`--unanswered`), as on a real desk.

Run it from the repository root with /usr/bin/python3: it starts `baton serve --config
config/examples/support/baton.yaml` (or --config) on a fresh log var/support-week.db and stops it
at the end. The tickets are drawn from --seed, so two runs send the same texts; decision ids (and
so an `audit:` section's draw) differ from run to run.
"""

import argparse
import asyncio
import collections
import random
import sys
import threading
from http.server import ThreadingHTTPServer

# example_agent first: it puts this checkout's clients/python on sys.path.
from example_agent import Reviewer
from baton_client import BatonClient, BatonError
from example_server import add_server_arguments, example_server, http_base
from support_triage import PasswordService, run_agent_tool

# What each kind of ticket says (a sentence each), and the tool a person would run for it.
KINDS = {
    "refund_payment": [
        "I was charged twice for the same order, please refund the duplicate charge",
        "the amount on my card is wrong, I want a refund of the difference",
        "there is a charge on my card I never made, refund it please",
        "you billed me two times this month, I need my money back",
    ],
    "reset_password": [
        "I forgot my password and cannot log in",
        "the login page says my password is wrong, please send a reset link",
        "I am locked out of my account after too many login attempts",
        "can you reset my password, the reset email never came",
    ],
    "search_help_center": [
        "how do I export my invoices as PDF",
        "is there an article about changing the language of the app",
        "where can I find the help center page about data exports",
        "what does the error code 4012 mean in the billing settings",
    ],
    "update_shipping_address": [
        "I moved, please change the shipping address of my order that has not shipped yet",
        "send my order to 12 Harbour Street instead, it has not shipped",
        "wrong address on my order, update it to my new flat before it ships",
        "please change where my parcel goes, I typed the street wrong",
    ],
    "hand_to_person": [
        "I want to talk to a real person about my contract",
        "this is the third time I write, hand me to a support person now",
        "please put me through to someone from the support team",
        "I need a human to look at my complaint",
    ],
    None: [  # nothing to run: a person denies whatever is proposed
        "hello?",
        "thanks, all good now",
        "test message please ignore",
        "asdf",
    ],
}

FILLERS = ["Hi,", "Hello team,", "Good morning.", "Quick question:", "Sorry to bother you again.", ""]
SIGN_OFFS = ["Thanks!", "Regards, Sam", "This is urgent.", "No rush.", "Cheers", ""]

# Arguments a person gives when running a tool the proposal did not name.
PERSON_ARGUMENTS = {
    "refund_payment": {"reason": "duplicate", "notify": True, "note": "checked the charges"},
    "search_help_center": {"query": "from the ticket"},
    "update_shipping_address": {"address": "12 Harbour Street"},
}


def make_tickets(rng, count, mixed_share):
    """(text, tool a person would run or None), drawn from `rng`."""
    kinds = list(KINDS)
    weights = [3, 3, 4, 2, 2, 1]
    tickets = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        parts = [rng.choice(FILLERS), rng.choice(KINDS[kind]) + "."]
        if rng.random() < mixed_share:  # a second concern makes the ticket ambiguous
            other = rng.choice([k for k in kinds if k not in (kind, None)])
            parts.append("Also, " + rng.choice(KINDS[other]) + ".")
        parts.append(rng.choice(SIGN_OFFS))
        tickets.append((" ".join(p for p in parts if p), kind))
    return tickets


def person_decides(escalation, truth, rng, unanswered):
    """What the simulated reviewer sends for `escalation` (None: leaves it pending)."""
    if rng.random() < unanswered:
        return None
    proposed = escalation.get("tool")
    if truth is None:
        return {"outcome": "deny", "reason": "nothing to do for this ticket"}
    if proposed == truth:
        return {"outcome": "execute", "tool": proposed, "arguments": escalation.get("arguments") or {},
                "reason": "the proposal is right"}
    return {"outcome": "execute", "tool": truth, "arguments": PERSON_ARGUMENTS.get(truth, {}),
            "reason": f"the ticket needs {truth}, not {proposed}"}


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=600)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--mixed", type=float, default=0.35, help="share of tickets with a second concern")
    parser.add_argument("--unanswered", type=float, default=0.05, help="share of escalations nobody answers")
    parser.add_argument("--service-port", type=int, default=8471, help="port of the example password service")
    add_server_arguments(parser, "support")
    parser.set_defaults(db="var/support-week.db")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    tickets = make_tickets(rng, args.tickets, args.mixed)
    service = ThreadingHTTPServer(("127.0.0.1", args.service_port), PasswordService)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    counts = collections.Counter()
    try:
        async with example_server(args, print) as url, BatonClient(url) as baton:
            reviewer = Reviewer(http_base(url))
            gate = asyncio.Semaphore(16)

            async def one(number, text, truth):
                async with gate:
                    session = baton.session(f"week-{number:04d}")
                    session.add({"role": "user", "content": text})
                    decision = await session.decide()
                    counts[decision["action"]] += 1
                    if decision["action"] == "execute":
                        if decision["executor"] == "agent":
                            ok, output = run_agent_tool(decision)
                            await session.tool_result(decision, ok, output)
                        else:
                            await session.baton_ran(decision)
                    elif decision["action"] == "escalate":
                        escalation = await reviewer.escalation(decision["escalation"])
                        answer = person_decides(escalation, truth, random.Random(f"{args.seed}/{number}"),
                                                args.unanswered)
                        if answer is None:
                            counts["left pending"] += 1
                            return
                        resolution = await reviewer.resolve(decision["escalation"], **answer)
                        counts[f"resolved {answer['outcome']}"] += 1
                        await baton.ack(resolution["id"])

            await asyncio.gather(*(one(i, text, truth) for i, (text, truth) in enumerate(tickets)))
    except BatonError as e:
        print(f"baton refused a frame: {e}", file=sys.stderr)
        return 1
    finally:
        service.shutdown()
    print(f"{args.tickets} tickets: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
