#!/usr/bin/python3
"""A support-triage agent on baton.

Each customer ticket is a session. Every turn the agent sends what happened since the last one and
baton answers which tool comes next, with its arguments and a lane from the policy
(config/examples/support/policy.yaml):

- execute: tools run by the agent (search_help_center, update_shipping_address, hand_to_person)
  are run here and reported with tool_result; tools baton runs itself (reset_password, an HTTP
  call) come back as a tool_result frame. This script serves that HTTP "password service" on
  127.0.0.1:8471 so the example is self-contained.
- fallback / escalate / deny: the ticket leaves the automatic path (a larger model or a person);
  the agent stops there.
- finish: the ticket is resolved. When baton proposes again a call that already succeeded in this
  ticket, the agent closes the ticket itself: a loop guard, as agent frameworks keep one.

Run it from the repository root with /usr/bin/python3 (Debian's python3-websockets): it starts
`baton serve --config config/examples/support/baton.yaml` on a fresh decision log
(var/support.db) and stops it at the end (--url uses a baton that is already running instead).
An escalated ticket ends here; examples/agents/oncall_incident.py shows what comes after.
"""

import argparse
import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# example_agent first: it puts this checkout's clients/python on sys.path.
from example_agent import run_session
from baton_client import BatonClient, BatonError
from example_server import add_server_arguments, example_server

TICKETS = {
    "ticket-101": [
        "I forgot my password and cannot log in. Please send me a password reset link.",
        "Got the reset link and I can log in again, thanks. My request is resolved.",
    ],
    "ticket-102": [
        "I was charged twice for the same order. Please refund the duplicate charge on my card.",
    ],
    "ticket-103": [
        "How do I export my invoices as PDF? Could you search the help center for an article?",
        "That article answered it, thanks. The request is resolved, nothing more to do.",
    ],
    "ticket-104": [
        "I moved last week. Please change the shipping address of my order that has not shipped yet "
        "to 12 Harbour Street.",
    ],
    "ticket-105": ["Is there an article about exporting data?"],
    "ticket-106": ["hello?"],
}

PROPOSALS = {
    "ticket-103": {"tool": "search_help_center", "arguments": {"query": "export invoices as PDF"}},
    "ticket-104": {"tool": "update_shipping_address", "arguments": {"address": "12 Harbour Street"}},
}


class PasswordService(BaseHTTPRequestHandler):
    """What reset_password's HTTP executor calls: POST /password-resets (and /refunds)."""

    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"sent": True, "decision": call["decision"], "tool": call["tool"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def run_agent_tool(decision):
    """The tools this agent runs itself (fakes that answer like the real ones would)."""
    tool = decision["tool"]
    if tool == "search_help_center":
        return True, {"articles": ["Exporting invoices as PDF", "Billing settings"]}
    if tool == "update_shipping_address":
        return True, {"updated": True, "address": decision["arguments"].get("address")}
    if tool == "hand_to_person":
        return True, {"queued_for": "support-team"}
    return False, {"error": f"this agent does not run {tool}"}


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-port", type=int, default=8471, help="port of the example password service")
    parser.add_argument("--max-turns", type=int, default=4)
    add_server_arguments(parser, "support")
    args = parser.parse_args()

    service = ThreadingHTTPServer(("127.0.0.1", args.service_port), PasswordService)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    try:
        async with example_server(args, print) as url, BatonClient(url) as baton:
            logs = {name: [] for name in TICKETS}
            # All tickets at once, over one connection: frames are matched by id.
            outcomes = await asyncio.gather(
                *(
                    run_session(baton.session(name), msgs, "user", run_agent_tool, logs[name], args.max_turns,
                                "ticket", proposal=PROPOSALS.get(name))
                    for name, msgs in TICKETS.items()
                )
            )
    except BatonError as e:
        print(f"baton refused a frame: {e}", file=sys.stderr)
        return 1
    finally:
        service.shutdown()
    for name, outcome in zip(TICKETS, outcomes):
        print("\n".join(logs[name]))
        print(f"{name}: ends with {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
