"""A small client for baton's agent protocol (docs/protocol.md), written the way an agent framework
would use it: one WebSocket, many sessions over it, frames matched to their requests by id.

Only Debian's python3-websockets is needed.
"""

import asyncio
import itertools
import json
import os

import websockets


class ProtocolError(Exception):
    """An error frame from baton: code and message."""

    def __init__(self, frame):
        super().__init__(f"{frame.get('code')}: {frame.get('error')}")
        self.code = frame.get("code")
        self.frame = frame


class BatonClient:
    """One connection to ws://HOST:PORT/v1/agent. Use as `async with BatonClient(url) as baton:`.

    `api_key` (default: the BATON_API_KEY environment variable) is sent as a bearer token, which a
    server with keys in its config (auth.keys, role agent) requires."""

    def __init__(self, url, api_key=None):
        self.url = url
        self.api_key = api_key if api_key is not None else os.environ.get("BATON_API_KEY")
        self._ids = itertools.count(1)
        self._waiting = {}  # frame id -> future of the decision, ack or error that answers it
        self._tool_results = {}  # decision id -> future of the tool_result baton sends
        self._ws = None
        self._reader = None

    async def __aenter__(self):
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        self._ws = await websockets.connect(self.url, max_size=2**22, extra_headers=headers)
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc):
        await self._ws.close()
        await self._reader

    def session(self, name):
        return Session(self, name)

    async def request(self, frame):
        frame["id"] = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[frame["id"]] = answer
        await self._ws.send(json.dumps(frame))
        reply = await asyncio.wait_for(answer, timeout=60)
        if reply.get("type") == "error":
            raise ProtocolError(reply)
        return reply

    def tool_result(self, decision):
        """The tool_result frame baton sends after running a tool itself."""
        return self._tool_results.setdefault(decision, asyncio.get_running_loop().create_future())

    async def _read(self):
        try:
            async for text in self._ws:
                frame = json.loads(text)
                kind = frame.get("type")
                if kind == "tool_result":
                    self.tool_result(frame["decision"]).set_result(frame)
                    continue
                key = frame.get("id") if kind == "decision" else frame.get("ref")
                waiter = self._waiting.pop(key, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame)
        except websockets.ConnectionClosed:
            pass
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("baton closed the connection"))


class Session:
    """One agent session: keeps the history as baton does and sends only what is new each turn."""

    def __init__(self, client, name):
        self.client = client
        self.name = name
        self.history = []
        self._unsent = []
        self._decided_once = False

    def add(self, event):
        self._unsent.append(event)

    async def decide(self, proposal=None, questions=None):
        frame = {"type": "decide", "session": self.name}
        if self._decided_once:
            frame["append"] = self._unsent
        else:
            frame["history"] = self.history + self._unsent
        if proposal:
            frame["proposal"] = proposal
        if questions:
            frame["questions"] = questions
        decision = await self.client.request(frame)
        self.history += self._unsent
        self._unsent = []
        self._decided_once = True
        return decision

    async def report(self, decision, ok, output):
        """The result of a tool the agent ran itself (executor `agent`)."""
        await self.client.request(
            {"type": "tool_result", "decision": decision["decision"], "ok": ok, "output": output}
        )
        self.add({"role": "tool", "tool": decision["tool"], "ok": ok, "output": output})

    async def baton_ran(self, decision):
        """Waits for the tool baton ran itself; its event is already in baton's history."""
        result = await asyncio.wait_for(self.client.tool_result(decision["decision"]), timeout=60)
        self.history.append(result["event"])
        return result


def describe(decision):
    tool = decision.get("tool") or "-"
    args = decision.get("arguments") or {}
    shown = ", ".join(f"{k}={v}" for k, v in args.items())
    return (
        f"{decision['action']:<8} {tool}({shown})  "
        f"[{decision['lane']}, confidence {decision['confidence']:.2f}]"
    )


async def run_session(session, messages, role, run_agent_tool, out, max_turns=4, what="task", note=None, **decide_args):
    """A task the way the example agents handle one: each message is an event of `role`; every turn
    baton decides, and the agent acts on the lane. Tools of executor `agent` go to
    run_agent_tool(decision) -> (ok, output); others baton runs. When baton proposes again a call
    that already succeeded, the agent closes the task itself (a loop guard, as frameworks keep one).
    Lines for people go to `out`; the outcome is returned."""
    name = session.name
    pending = list(messages)
    session.add({"role": role, "content": pending.pop(0)})
    done = []  # calls that succeeded in this task
    for _ in range(max_turns):
        decision = await session.decide(**decide_args)
        out.append(f"{name} turn {decision['turn']}: {describe(decision)}{note(decision) if note else ''}")
        if decision["action"] != "execute":
            return decision["action"]
        call = (decision["tool"], decision["arguments"])
        if call in done:
            out.append(f"{name}   {decision['tool']} already succeeded here: the agent closes the {what}")
            return "closed by the agent"
        if decision["executor"] == "agent":
            ok, output = run_agent_tool(decision)
            await session.report(decision, ok, output)
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
