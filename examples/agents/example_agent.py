"""What the example agents share besides the client (clients/python's baton_client): the agent loop
they run each task through (`run_session`), how they print a decision (`describe`, `call_text`),
and `Reviewer`, a person's side over baton's reviewer HTTP API for the examples that play the
reviewer themselves.

Importing it puts this checkout's clients/python on sys.path (nothing is pip-installed), so the
scripts import it before baton_client.
"""

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

from baton_client import BatonError  # noqa: E402


class Reviewer:
    """A person's side over baton's reviewer HTTP API (docs/escalations.md), for an example that plays
    the reviewer itself. `api_key` (default: $BATON_REVIEWER_KEY) needs the role reviewer when the
    server has keys."""

    def __init__(self, base_url, api_key=None):
        self.base_url = base_url
        self.api_key = api_key if api_key is not None else os.environ.get("BATON_REVIEWER_KEY")

    def _call(self, path, body=None):
        request = urllib.request.Request(self.base_url + path, data=None if body is None else json.dumps(body).encode())
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            try:
                body = json.load(e)
            except ValueError:
                body = {"code": f"HTTP_{e.code}", "error": e.reason}
            raise BatonError.from_frame(body) from None

    async def escalation(self, escalation):
        return await asyncio.to_thread(self._call, f"/v1/escalations/{escalation}")

    async def pending(self):
        return (await asyncio.to_thread(self._call, "/v1/escalations?status=pending"))["escalations"]

    async def resolve(self, escalation, **resolution):
        return await asyncio.to_thread(self._call, f"/v1/escalations/{escalation}/resolve", resolution)


def call_text(tool, args):
    """`tool(k=v, ...)`, as the examples print a tool call."""
    return tool + "(" + ", ".join(f"{k}={v}" for k, v in (args or {}).items()) + ")"


def describe(decision):
    return (
        f"{decision['action']:<8} {call_text(decision.get('tool') or '-', decision.get('arguments'))}  "
        f"[{decision['lane']}, confidence {decision['confidence']:.2f}]"
    )


async def run_session(session, messages, role, run_agent_tool, out, max_turns=4, what="task", note=None,
                      await_person=None, **decide_args):
    """A task the way the example agents handle one: each message is an event of `role`; every turn
    baton decides, and the agent acts on the lane. Tools of executor `agent` go to
    run_agent_tool(decision) -> (ok, output); others baton runs. When baton proposes again a call
    that already succeeded, the agent closes the task itself (a loop guard, as frameworks keep one).
    An escalation ends the task unless `await_person(decision)` is given: it returns the person's
    resolution (or None when none came), which the agent acknowledges and follows, then goes on
    with the next message. Lines for people go to `out`; the outcome is returned."""
    name = session.name
    pending = list(messages)
    session.add({"role": role, "content": pending.pop(0)})
    done = []  # calls that succeeded in this task
    for _ in range(max_turns):
        decision = await session.decide(**decide_args)
        out.append(f"{name} turn {decision['turn']}: {describe(decision)}{note(decision) if note else ''}")
        if decision["action"] == "escalate" and await_person:
            resolution = await await_person(decision)
            if resolution is None:
                return "escalate (nobody resolved it in time)"
            # Acknowledged (the client waits until baton has it); resume shows nothing is left.
            await session.client.ack(resolution["id"])
            resumed = await session.resume()
            call = ""
            if resolution["tool"]:
                call = " " + call_text(resolution["tool"], resolution["arguments"])
            out.append(f"{name}   resolution {resolution['id']}: {resolution['outcome']}{call} by {resolution['reviewer']} "
                       f"({resolution['by']}): \"{resolution['reason']}\"; acknowledged, "
                       f"{resumed['resolutions']} left for this {what}")
            if resolution["outcome"] != "execute":
                return "denied by a person"
            if resolution["tool"] == "finish":
                return "finished by a person"
            # The person's call is now this turn's: run it (here, or baton already runs it).
            decision = {key: resolution[key] for key in ("decision", "tool", "arguments", "executor")}
        elif decision["action"] != "execute":
            return decision["action"]
        call = (decision["tool"], decision["arguments"])
        if call in done:
            out.append(f"{name}   {decision['tool']} already succeeded here: the agent closes the {what}")
            return "closed by the agent"
        if decision["executor"] == "agent":
            ok, output = run_agent_tool(decision)
            await session.tool_result(decision, ok, output)
            out.append(f"{name}   ran {decision['tool']} here: ok={ok} output={output}")
        else:
            result = await session.baton_ran(decision)
            ok = result["ok"]
            out.append(f"{name}   baton ran {decision['tool']}: ok={ok} output={result['output']}")
        if ok:
            done.append(call)
        if not pending:
            return "execute"
        session.add({"role": role, "content": pending.pop(0)})
    return "max_turns"
