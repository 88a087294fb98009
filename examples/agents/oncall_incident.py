#!/usr/bin/python3
"""An on-call incident agent on baton.

Each alert is a session. The agent reports what it sees; baton answers which remediation comes
next, with the policy's lane (config/examples/oncall/policy.yaml): restart_service is run by baton
itself (a command executor), query_metrics, silence_alert and page_oncall are run here, a high-risk
rollback or a SEV1-like severity goes to a person, and an unclear case falls back or escalates.
When baton proposes again a call that already succeeded for this alert, the agent closes the
alert itself (a loop guard, as agent frameworks keep one). Each turn also asks one extra question in the
same forward pass (is this a known issue?), which the policy does not read but the agent prints.

An escalated alert waits for a person: it is pending in the reviewer inbox (/inbox) until someone
resolves it; the agent then receives the resolution, acknowledges it, runs what the person chose
(or stops on a deny) and goes on with the alert. With --resolve-as-reviewer the script plays the
reviewer itself over the reviewer HTTP API (the REVIEWS below), so the round trip runs unattended.

Run it from the repository root with /usr/bin/python3 (Debian's python3-websockets): it starts
`baton serve --config config/examples/oncall/baton.yaml` on a fresh decision log (var/oncall.db)
and stops it at the end (--url uses a baton that is already running instead).
"""

import argparse
import asyncio
import sys

# example_agent first: it puts this checkout's clients/python on sys.path.
from example_agent import Reviewer, run_session
from baton_client import BatonClient, BatonError
from example_server import add_server_arguments, example_server, http_base

ALERTS = {
    "alert-checkout-oom": [
        "Alert: checkout service pods are crashing, out of memory, memory leaking; restart the pods.",
        "After the restart the checkout service error rate is back to normal. The incident is resolved and the alert has cleared.",
    ],
    "alert-search-latency": [
        "Alert: search service latency is high. Query the dashboards and metrics for its error rate and saturation.",
    ],
    "alert-api-release": [
        "The latest deploy of the public API is a bad release that broke login: roll back the deploy.",
        "The rollback finished and login works again. The incident is resolved and the alert has cleared.",
    ],
    "alert-disk-flapping": [
        "A noisy disk alert keeps flapping with no customer impact; silence the alert.",
    ],
    "alert-api-outage": [
        "SEV1 outage: the public API is down for every customer, all requests fail. Customers are affected right now.",
    ],
    "alert-api-errors": ["api errors up; restart?"],
    "alert-search-index": ["The search index looks stale"],
}

# What the reviewer decides with --resolve-as-reviewer: the proposed tool, another tool, a deny.
REVIEWS = {
    "alert-api-release": {"outcome": "execute", "reason": "the release broke login: roll it back"},
    "alert-api-outage": {"outcome": "execute", "tool": "page_oncall",
                         "reason": "a SEV1 needs the on-call engineer, not a silenced alert"},
    "alert-search-index": {"outcome": "deny", "reason": "a stale index is not an incident: reindex in office hours"},
}


def review(name, escalation):
    """The reviewer's call on an escalation, from what the reviewer API shows of it."""
    ran = [e.get("tool") for e in escalation["state"] if e.get("role") == "tool" and e.get("ok")]
    if escalation["tool"] in ran:
        # The keyword engine reads the whole history, so it proposes the done tool again.
        return {"outcome": "execute", "tool": "finish", "reason": f"{escalation['tool']} already ran and worked: the alert is over"}
    return REVIEWS.get(name, {"outcome": "deny", "reason": "not an alert this example reviews"})


EXTRA_QUESTIONS = {
    "known_issue": {"type": "noul", "instructions": "Is this a known issue that has a runbook?"},
}


def run_agent_tool(decision):
    tool = decision["tool"]
    if tool == "query_metrics":
        service = decision["arguments"].get("service")
        return True, {"service": service, "p99_ms": 840, "error_rate": 0.002, "saturation": 0.93}
    if tool == "silence_alert":
        return True, {"silenced_for_minutes": 60}
    if tool == "page_oncall":
        return True, {"paged": "primary on-call"}
    if tool == "rollback_deploy":
        return True, {"rolled_back_to": "api v2.41.0"}
    return False, {"error": f"this agent does not run {tool}"}


def known_issue(decision):
    known = decision["answers"]["known_issue"]["noul"] if decision.get("answers") else None
    return f"  known_issue={known}"


def person(args, reviewer, session, out):
    """What the agent does on an escalation: waits for its resolution, which the script gives
    itself as the reviewer (--resolve-as-reviewer) or a person gives in the inbox."""

    async def await_person(decision):
        escalation = decision["escalation"]
        if args.resolve_as_reviewer:
            seen = await reviewer.escalation(escalation)
            decided = review(session.name, seen)
            tool = decided.get("tool", seen["tool"]) if decided["outcome"] == "execute" else ""
            out.append(f"{session.name}   reviewer reads {escalation}: \"{seen['question']}\" and resolves it: "
                       f"{decided['outcome']} {tool}".rstrip())
            await reviewer.resolve(escalation, **decided)
            timeout = 30
        else:
            print(f"{session.name}: escalated ({escalation}); resolve it at {reviewer.base_url}/inbox "
                  f"(waiting up to {args.wait:g} s)", file=sys.stderr, flush=True)
            timeout = args.wait
        try:
            # Received already (pushed when the person resolved it) or to come.
            return await session.resolution(escalation, timeout=timeout)
        except BatonError as e:
            if e.code == "TIMEOUT":
                return None
            raise

    return await_person


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolve-as-reviewer", action="store_true",
                        help="resolve the escalations as the reviewer, over the reviewer HTTP API "
                             "($BATON_REVIEWER_KEY when the server has keys)")
    parser.add_argument("--wait", type=float, default=600,
                        help="without --resolve-as-reviewer: how long an escalated alert waits for a person, "
                             "in seconds (default 600; 0: it ends at the escalation)")
    parser.add_argument("--max-turns", type=int, default=4)
    add_server_arguments(parser, "oncall")
    args = parser.parse_args()
    try:
        async with example_server(args, print) as url:
            reviewer = Reviewer(http_base(url))
            async with BatonClient(url) as baton:
                logs = {name: [] for name in ALERTS}
                waits = args.resolve_as_reviewer or args.wait > 0
                outcomes = await asyncio.gather(
                    *(
                        run_session(baton.session(name), r, "monitor", run_agent_tool, logs[name], args.max_turns,
                                    "alert", note=known_issue, questions=EXTRA_QUESTIONS,
                                    await_person=person(args, reviewer, baton.session(name), logs[name]) if waits else None)
                        for name, r in ALERTS.items()
                    )
                )
            for name, outcome in zip(ALERTS, outcomes):
                print("\n".join(logs[name]))
                print(f"{name}: ends with {outcome}")
            try:
                n = len(await reviewer.pending())
                left = f"{n} escalation{'' if n == 1 else 's'} wait{'s' if n == 1 else ''} for a person"
            except BatonError as e:
                left = f"the pending escalations cannot be listed with this key ({e})"
            print(f"{left} ({reviewer.base_url}/inbox)")
    except BatonError as e:
        print(f"baton refused: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
