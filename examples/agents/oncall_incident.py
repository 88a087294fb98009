#!/usr/bin/env python3
"""An on-call incident agent on baton.

Each alert is a session. The agent reports what it sees; baton answers which remediation comes
next, with the policy's lane (config/examples/oncall/policy.yaml): restart_service is run by baton
itself (a command executor), query_metrics, silence_alert and page_oncall are run here, a high-risk
rollback or a SEV1-like severity goes to a person, and an unclear case falls back or escalates.
When baton proposes again a call that already succeeded for this alert, the agent closes the
alert itself (a loop guard, as agent frameworks keep one). Each turn also asks one extra question in the
same forward pass (is this a known issue?), which the policy does not read but the agent prints.

Run it against `baton serve --config config/examples/oncall/baton.yaml`.
"""

import argparse
import asyncio
import sys

from baton_client import BatonClient, ProtocolError, run_session

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
    return False, {"error": f"this agent does not run {tool}"}


def known_issue(decision):
    known = decision["answers"]["known_issue"]["noul"] if decision.get("answers") else None
    return f"  known_issue={known}"


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8472/v1/agent")
    parser.add_argument("--max-turns", type=int, default=4)
    args = parser.parse_args()
    try:
        async with BatonClient(args.url) as baton:
            logs = {name: [] for name in ALERTS}
            outcomes = await asyncio.gather(
                *(
                    run_session(baton.session(name), r, "monitor", run_agent_tool, logs[name], args.max_turns,
                                "alert", note=known_issue, questions=EXTRA_QUESTIONS)
                    for name, r in ALERTS.items()
                )
            )
    except ProtocolError as e:
        print(f"baton refused a frame: {e}", file=sys.stderr)
        return 1
    for name, outcome in zip(ALERTS, outcomes):
        print("\n".join(logs[name]))
        print(f"{name}: ends with {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
