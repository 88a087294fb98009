"""A small client for baton's agent protocol (docs/protocol.md), written the way an agent framework
would use it: one WebSocket, many sessions over it, frames matched to their requests by id.

Needs the `websockets` package: Debian's python3-websockets, which /usr/bin/python3 has (another
python3, such as a pyenv or a virtual environment, needs `pip install websockets`).
"""

import asyncio
import itertools
import json
import os
import sys
import urllib.error
import urllib.request

try:
    import websockets
except ModuleNotFoundError:
    sys.exit(f"{sys.executable} has no `websockets` module: run the example with /usr/bin/python3 "
             "(Debian's python3-websockets), or `pip install websockets` for this interpreter")


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
        self._resolutions = {}  # escalation id -> future of the resolution a person (or a deadline) gave
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

    async def request(self, frame, retries=5):
        """Sends `frame` and returns its answer. A frame refused for the connection's or the key's
        rate (RATE_LIMITED, with this frame's id as `ref`) is sent again after `retry_after_ms`."""
        for attempt in range(retries + 1):
            frame["id"] = next(self._ids)
            answer = asyncio.get_running_loop().create_future()
            self._waiting[frame["id"]] = answer
            await self._ws.send(json.dumps(frame))
            reply = await asyncio.wait_for(answer, timeout=60)
            if reply.get("code") == "RATE_LIMITED" and attempt < retries:
                await asyncio.sleep(reply.get("retry_after_ms", 1000) / 1000)
                continue
            if reply.get("type") == "error":
                raise ProtocolError(reply)
            return reply

    def tool_result(self, decision):
        """The tool_result frame baton sends after running a tool itself."""
        return self._tool_results.setdefault(decision, asyncio.get_running_loop().create_future())

    def resolution(self, escalation):
        """The resolution of an escalation, sent when a person resolves it (or on `resume`)."""
        return self._resolutions.setdefault(escalation, asyncio.get_running_loop().create_future())

    async def acknowledge(self, resolution, session):
        """Acks a resolution, then checks with `resume` that baton no longer holds it for the
        session (an ack has no answer of its own; a refused one gets an error frame first)."""
        for attempt in range(6):
            ack_id = next(self._ids)
            refused = asyncio.get_running_loop().create_future()
            self._waiting[ack_id] = refused
            await self._ws.send(json.dumps({"type": "ack", "id": ack_id, "resolution": resolution["id"]}))
            resumed = await self.request({"type": "resume", "session": session})
            self._waiting.pop(ack_id, None)
            if not refused.done():
                return resumed
            error = refused.result()
            if error.get("code") != "RATE_LIMITED" or attempt == 5:
                raise ProtocolError(error)
            await asyncio.sleep(error.get("retry_after_ms", 1000) / 1000)  # the ack was not read: again

    async def _read(self):
        try:
            async for text in self._ws:
                frame = json.loads(text)
                kind = frame.get("type")
                if kind == "tool_result":
                    self.tool_result(frame["decision"]).set_result(frame)
                    continue
                if kind == "resolution":
                    # At least once: a resume sends again what was not acknowledged yet.
                    waiter = self.resolution(frame["resolution"]["escalation"])
                    if not waiter.done():
                        waiter.set_result(frame["resolution"])
                    continue
                key = frame.get("id") if kind == "decision" else frame.get("ref")
                waiter = self._waiting.pop(key, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(frame)
                elif kind == "error":
                    # A frame baton could not read an id from (binary, too large): nothing waits on
                    # it here, so it is said rather than dropped.
                    print(f"baton refused a frame: {frame.get('code')}: {frame.get('error')}", file=sys.stderr)
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
            raise ProtocolError(body) from None

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
            resumed = await session.client.acknowledge(resolution, name)
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
