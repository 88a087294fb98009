"""baton_client against a real `baton serve` on 127.0.0.1 (tests/baton_server.py).

Run from clients/python: /usr/bin/python3 -m unittest discover -s tests -t . (BATON_BIN=path/to/baton).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import unittest
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # clients/python: baton_client, not installed
sys.path.insert(0, HERE)

from baton_client import BatonClient, BatonError, Decision, Reconnect  # noqa: E402
from baton_server import METRICS, RESOLVED, RESTART, ROLLBACK, BatonServer  # noqa: E402

FAST = Reconnect(initial_delay=0.05, max_delay=0.5)


class Recording(BatonClient):
    """The client, recording the frames it sends and receives and counting its connections;
    `openable` cleared holds a reconnect back (so that a reviewer can act while it is away)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: List[Dict[str, Any]] = []
        self.received: List[Dict[str, Any]] = []
        self.opened = 0
        self.openable = asyncio.Event()
        self.openable.set()

    async def _open(self) -> Any:
        await self.openable.wait()
        conn = await super()._open()
        self.opened += 1
        send = conn.send

        async def recording_send(text: str) -> None:
            self.sent.append(json.loads(text))
            await send(text)

        conn.send = recording_send
        return conn

    def _dispatch(self, text: str) -> None:
        self.received.append(json.loads(text))
        super()._dispatch(text)

    def decides(self, session: str) -> List[Dict[str, Any]]:
        return [f for f in self.sent if f["type"] == "decide" and f["session"] == session]


tmp: tempfile.TemporaryDirectory
main: BatonServer


def setUpModule() -> None:
    global tmp, main
    tmp = tempfile.TemporaryDirectory()
    main = BatonServer(tmp.name, "main").start()


def tearDownModule() -> None:
    main.close()
    tmp.cleanup()


async def wait_until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Case(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        # The tests call the server and its log synchronously: not what asyncio's debug mode
        # (on in these tests) should report as slow callbacks.
        asyncio.get_running_loop().slow_callback_duration = 10


class Turns(Case):
    """Decisions, histories and tool results on one long-lived server."""

    async def test_history_then_append(self) -> None:
        async with Recording(main.url) as baton:
            s = baton.session("history-append")
            s.add({"role": "monitor", "content": METRICS})
            first = await s.decide()
            self.assertEqual((first["turn"], first["action"], first["tool"]), (1, "execute", "query_metrics"))
            await s.tool_result(first, True, {"p99_ms": 840})
            second = await s.decide(events=[{"role": "monitor", "content": RESOLVED}])
            self.assertEqual(second["turn"], 2)
            frames = baton.decides("history-append")
            self.assertEqual(frames[0]["history"], [{"role": "monitor", "content": METRICS}])
            self.assertNotIn("append", frames[0])
            self.assertNotIn("turn", frames[0])
            tool_event = {"role": "tool", "tool": "query_metrics", "ok": True, "output": {"p99_ms": 840}}
            self.assertEqual(frames[1]["append"], [tool_event, {"role": "monitor", "content": RESOLVED}])
            self.assertNotIn("history", frames[1])
            # Baton decided turn 2 on the whole history, in the client's order.
            self.assertEqual(main.state(second["decision"]), s.history)
            self.assertEqual(len(s.history), 3)
            self.assertIs(baton.session("history-append"), s)

    async def test_many_sessions_on_one_connection(self) -> None:
        async with Recording(main.url) as baton:
            names = [f"many-{i:02d}" for i in range(30)]

            async def two_turns(name: str) -> List[Decision]:
                s = baton.session(name)
                first = await s.decide(events=[{"role": "monitor", "content": ROLLBACK if name.endswith("7") else METRICS}])
                second = await s.decide(events=[{"role": "monitor", "content": f"{name}: {RESOLVED}"}])
                return [first, second]

            results = await asyncio.gather(*(two_turns(n) for n in names))
            self.assertEqual(baton.opened, 1)
            for name, (first, second) in zip(names, results):
                self.assertEqual((first["session"], first["turn"], second["session"], second["turn"]), (name, 1, name, 2))
            ids = {d["decision"] for pair in results for d in pair}
            self.assertEqual(len(ids), 60)
            self.assertEqual(sum(1 for f in baton.sent if "append" in f), 30)
            self.assertEqual(baton.in_flight, 0)

    async def test_tool_result_is_acknowledged(self) -> None:
        async with BatonClient(main.url) as baton:
            s = baton.session("agent-tool")
            d = await s.decide(events=[{"role": "monitor", "content": METRICS}])
            self.assertEqual((d["action"], d["executor"]), ("execute", "agent"))
            await s.tool_result(d, True, {"p99_ms": 840})
            # The ack came once the run was in the log.
            runs = main.sql(f"SELECT tool, ok, executor FROM tool_runs WHERE decision = '{d['decision']}'")
            self.assertEqual(runs, [{"tool": "query_metrics", "ok": 1, "executor": "agent"}])
            self.assertEqual(s.history[-1], {"role": "tool", "tool": "query_metrics", "ok": True, "output": {"p99_ms": 840}})
            with self.assertRaises(BatonError) as e:
                await s.tool_result(d, True, {})
            self.assertEqual(e.exception.code, "DUPLICATE_TOOL_RESULT")

    async def test_baton_ran(self) -> None:
        async with Recording(main.url) as baton:
            heard: List[Dict[str, Any]] = []
            baton.on("tool_result", heard.append)
            s = baton.session("command-tool")
            d = await s.decide(events=[{"role": "monitor", "content": RESTART}])
            self.assertEqual((d["action"], d["tool"], d["executor"]), ("execute", "restart_service", "command"))
            s.add({"role": "monitor", "content": "added while baton ran the tool"})
            ran = await s.baton_ran(d)
            self.assertEqual((ran["decision"], ran["ok"], ran["output"]), (d["decision"], True, {"restarted": "checkout", "pods": 3}))
            self.assertEqual(heard, [ran])
            # Baton's event sits where baton put it, before what the agent added meanwhile, and
            # the next append does not send it again.
            self.assertEqual([e["role"] for e in s.history], ["monitor", "tool", "monitor"])
            self.assertEqual(s.history[1], ran["event"])
            nxt = await s.decide()
            self.assertEqual(baton.decides("command-tool")[1]["append"], [s.history[2]])
            self.assertEqual(main.state(nxt["decision"]), s.history)
            with self.assertRaises(ValueError):
                await s.baton_ran({"decision": "d-x", "action": "execute", "executor": "agent"})

    async def test_error_frames_raise_with_their_code(self) -> None:
        async with BatonClient(main.url) as baton:
            s = baton.session("errors")
            s.add({"role": "monitor", "content": METRICS})
            with self.assertRaises(BatonError) as e:
                await s.decide(questions={"tool": {"type": "noul", "instructions": "clashes with the registry's"}})
            self.assertEqual(e.exception.code, "QUESTION_CONFLICT")
            self.assertEqual((e.exception.frame or {}).get("type"), "error")
            with self.assertRaises(BatonError) as e:
                await s.decide(proposal={"tool": 5})  # type: ignore[typeddict-item]
            self.assertEqual(e.exception.code, "INVALID_FRAME")
            self.assertEqual(e.exception.detail[0]["loc"], ["proposal", "tool"])
            # A refused turn leaves the session as it was: the next one is turn 1, a full history.
            d = await s.decide()
            self.assertEqual(d["turn"], 1)
            with self.assertRaises(BatonError) as e:
                await s.tool_result({"decision": "d-000000000000-00000000", "tool": "query_metrics"}, True, {})
            self.assertEqual(e.exception.code, "UNKNOWN_DECISION")
            with self.assertRaises(BatonError) as e:
                await baton.ack("v-000000000000-00000000")
            self.assertEqual(e.exception.code, "UNKNOWN_RESOLUTION")
            # The client's own: no resolution in time, a closed client.
            escalated = await baton.session("errors-escalated").decide(events=[{"role": "monitor", "content": ROLLBACK}])
            self.assertEqual(escalated["action"], "escalate")
            with self.assertRaises(BatonError) as e:
                await baton.session("errors-escalated").resolution(escalated["escalation"], timeout=0.2)
            self.assertEqual(e.exception.code, "TIMEOUT")
            waiting = asyncio.ensure_future(baton.session("errors-escalated").resolution(escalated["escalation"]))
            await asyncio.sleep(0.05)
        with self.assertRaises(BatonError) as e:
            await waiting
        self.assertEqual(e.exception.code, "CLOSED")
        with self.assertRaises(BatonError) as e:
            await s.decide()
        self.assertEqual(e.exception.code, "CLOSED")
        with self.assertRaises(ValueError):
            baton.session("not a session name")

    async def test_connect_failures(self) -> None:
        import socket

        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        with self.assertRaises(BatonError) as e:
            await BatonClient(f"ws://127.0.0.1:{port}/v1/agent").connect()
        self.assertEqual(e.exception.code, "CONNECT_FAILED")

    async def test_back_pressure_bounds_frames_in_flight(self) -> None:
        async with Recording(main.url, max_in_flight=4) as baton:
            seen: List[int] = []
            done = asyncio.Event()

            async def watch() -> None:
                while not done.is_set():
                    seen.append(baton.in_flight)
                    await asyncio.sleep(0)

            watcher = asyncio.ensure_future(watch())
            names = [f"pressure-{i:02d}" for i in range(40)]
            decisions = await asyncio.gather(*(baton.session(n).decide(events=[{"role": "monitor", "content": METRICS}])
                                               for n in names))
            done.set()
            await watcher
            self.assertEqual([d["session"] for d in decisions], names)
            self.assertEqual(max(seen), 4)  # reached, never passed
            # The rest waited in the order they came.
            self.assertEqual([f["session"] for f in baton.sent if f["type"] == "decide"], names)


class RateLimits(Case):
    """A server with an API key and 10 frames per second."""

    dir: tempfile.TemporaryDirectory
    server: BatonServer

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.TemporaryDirectory()
        cls.server = BatonServer(cls.dir.name, "tight", {"max_frames_per_second": 10},
                                 keys=[("tests", "agent", "BATON_TEST_AGENT_KEY", "python-client-test-key-0123")]).start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.close()
        cls.dir.cleanup()

    async def test_refused_upgrade_has_the_servers_code(self) -> None:
        with self.assertRaises(BatonError) as e:
            await BatonClient(self.server.url, api_key="").connect()
        self.assertEqual(e.exception.code, "UNAUTHORIZED")
        self.assertEqual(e.exception.detail["status"], 401)

    async def test_rate_limited_frames_are_sent_again(self) -> None:
        # max_in_flight 5: a burst past the rate stays under max_bad_frames (10) refusals in a row.
        async with Recording(self.server.url, api_key="python-client-test-key-0123", max_in_flight=5) as baton:
            names = [f"rate-{i:02d}" for i in range(25)]
            decisions = await asyncio.gather(*(baton.session(n).decide(events=[{"role": "monitor", "content": METRICS}])
                                               for n in names))
            self.assertEqual([d["session"] for d in decisions], names)
            refused = [f for f in baton.received if f.get("code") == "RATE_LIMITED"]
            self.assertGreater(len(refused), 0)
            self.assertTrue(all(f["retry_after_ms"] > 0 for f in refused))
            self.assertEqual(baton.opened, 1)  # never closed for bad frames
            rows = self.server.sql("SELECT count(*) AS n FROM decisions")
            self.assertEqual(rows, [{"n": 25}])


class Forgotten(Case):
    """An append baton no longer has the session for (max_sessions 2: idle ones are forgotten)."""

    async def test_unknown_session_is_sent_again_as_history(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            server = BatonServer(d, "forgetful", {"max_sessions": 2, "session_idle_s": 1})
            await asyncio.to_thread(server.start)
            try:
                async with Recording(server.url) as baton:
                    s = baton.session("forgotten")
                    await s.decide(events=[{"role": "monitor", "content": METRICS}])
                    await baton.session("other-1").decide(events=[{"role": "monitor", "content": METRICS}])
                    # Both idle past session_idle_s and baton full: a new session pushes them out.
                    await asyncio.sleep(1.1)
                    await baton.session("other-2").decide(events=[{"role": "monitor", "content": METRICS}])
                    again = await s.decide(events=[{"role": "monitor", "content": RESOLVED}])
                    frames = baton.decides("forgotten")
                    self.assertEqual(["history" in f for f in frames], [True, False, True])
                    self.assertEqual(frames[1]["append"], [{"role": "monitor", "content": RESOLVED}])
                    self.assertEqual(again["turn"], 1)  # a new session on baton's side, from the whole history
                    self.assertEqual(server.state(again["decision"]), s.history)
                    # The next turn appends again.
                    await s.decide(events=[{"role": "monitor", "content": "and one more"}])
                    self.assertIn("append", baton.decides("forgotten")[-1])
            finally:
                await asyncio.to_thread(server.close)


class Ending(Case):
    """`end`: baton forgets the session and the name starts afresh; a full baton (max_sessions 2)
    evicts the least recently used idle session, and the client resends its history."""

    @staticmethod
    def sessions_held(server: BatonServer) -> int:
        return server.http("GET", "/health")[1]["sessions"]

    @staticmethod
    def answers(baton: Recording, names: List[str]) -> List[str]:
        """How baton answered each `end` of these sessions: `ended` or an error's code."""
        ends = [f for f in baton.sent if f["type"] == "end" and f["session"] in names]
        answered = [next(r for r in baton.received if r.get("ref") == f["id"]) for f in ends]
        return [a["code"] if a["type"] == "error" else a["type"] for a in answered]

    async def test_end_is_answered_ended_and_the_name_starts_afresh(self) -> None:
        async with Recording(main.url) as baton:
            s = baton.session("ended-once")
            await s.decide(events=[{"role": "monitor", "content": RESOLVED}])
            await s.decide(events=[{"role": "monitor", "content": RESOLVED}])
            held = self.sessions_held(main)
            await s.end()
            self.assertEqual(self.answers(baton, ["ended-once"]), ["ended"])
            end = next(f for f in baton.sent if f["type"] == "end")
            self.assertIn({"type": "ended", "ref": end["id"], "session": "ended-once"}, baton.received)
            self.assertEqual(self.sessions_held(main), held - 1, "baton no longer holds it")

            fresh = baton.session("ended-once")
            self.assertIsNot(fresh, s)
            again = await fresh.decide(events=[{"role": "monitor", "content": RESOLVED}])
            self.assertEqual(again["turn"], 1, "a new session on baton's side")
            self.assertEqual(baton.decides("ended-once")[-1]["history"], [{"role": "monitor", "content": RESOLVED}])

            # Ended twice (baton remembers the name) and a name baton never had: both return.
            await fresh.end()
            await baton.session("ended-once").end()
            await baton.session("never-had").end()
            self.assertEqual(self.answers(baton, ["ended-once", "never-had"]),
                             ["ended", "ended", "ended", "UNKNOWN_SESSION"])

    async def test_a_full_baton_evicts_the_least_recently_used_idle_session(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            server = BatonServer(d, "full", {"max_sessions": 2})
            await asyncio.to_thread(server.start)
            try:
                async with Recording(server.url) as baton:
                    cleared = [{"role": "monitor", "content": RESOLVED}]  # finish: nothing left in flight
                    # The name was used and ended before: its new session behaves as any other.
                    await baton.session("evicted").decide(events=cleared)
                    await baton.session("evicted").end()
                    s = baton.session("evicted")
                    await s.decide(events=cleared)
                    await baton.session("b").decide(events=cleared)
                    await baton.session("c").decide(events=cleared)  # full: "evicted", the least recently used, goes
                    self.assertEqual(self.sessions_held(server), 2)

                    again = await s.decide(events=cleared)
                    self.assertEqual(again["turn"], 1, "baton had forgotten it: the full history is a new session's turn 1")
                    frames = baton.decides("evicted")[-3:]
                    self.assertEqual([f"history {len(f['history'])}" if "history" in f else f"append {len(f['append'])}"
                                      for f in frames], ["history 1", "append 1", "history 2"])
                    refused = next(r for r in baton.received if r.get("ref") == frames[1]["id"])
                    self.assertEqual(refused["code"], "UNKNOWN_SESSION")
                    self.assertEqual(server.state(again["decision"]), s.history)
                    self.assertEqual(self.sessions_held(server), 2, "it evicted another idle one in turn")
            finally:
                await asyncio.to_thread(server.close)


class Restarts(Case):
    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        self.dir = tempfile.TemporaryDirectory()
        self.server = BatonServer(self.dir.name, "restarted")
        await asyncio.to_thread(self.server.start)

    async def asyncTearDown(self) -> None:
        await asyncio.to_thread(self.server.close)
        self.dir.cleanup()

    async def test_graceful_restart_mid_session(self) -> None:
        async with Recording(self.server.url, reconnect=FAST) as baton:
            events: List[Any] = []
            baton.on("reconnecting", lambda e: events.append(("reconnecting", e["attempt"])))
            baton.on("reconnected", lambda e: events.append(("reconnected", e["sessions"])))
            s = baton.session("through-restart")
            first = await s.decide(events=[{"role": "monitor", "content": METRICS}])
            await s.tool_result(first, True, {"p99_ms": 840})
            self.assertEqual(await asyncio.to_thread(self.server.stop), 0)  # SIGTERM: close 1001
            await wait_until(lambda: not baton.connected, "the client to see the drop")
            # A turn asked while baton is down waits for the reconnect.
            pending = asyncio.ensure_future(s.decide(events=[{"role": "monitor", "content": RESOLVED}]))
            await asyncio.sleep(0.3)
            self.assertFalse(pending.done())
            await asyncio.to_thread(self.server.start)
            second = await asyncio.wait_for(pending, 10)
            self.assertEqual(baton.opened, 2)
            self.assertEqual(events[0], ("reconnecting", 1))
            self.assertEqual(events[-1], ("reconnected", 1))
            # Baton forgot the session: the turn after the reconnect sent the whole history.
            frame = baton.decides("through-restart")[-1]
            self.assertEqual(frame["history"], s.history)
            self.assertEqual(second["turn"], 1)
            self.assertEqual(self.server.state(second["decision"]), s.history)
            self.assertEqual([e["role"] for e in s.history], ["monitor", "tool", "monitor"])
            resumes = [f for f in baton.sent if f["type"] == "resume"]
            self.assertEqual([f["session"] for f in resumes], ["through-restart"])
            # And the one after that appends.
            await s.decide(events=[{"role": "monitor", "content": "one more"}])
            self.assertIn("append", baton.decides("through-restart")[-1])

    async def test_reconnecting_gives_up_after_max_attempts(self) -> None:
        async with BatonClient(self.server.url, reconnect=Reconnect(0.05, 0.1, max_attempts=2)) as baton:
            attempts: List[int] = []
            errors: List[BatonError] = []
            baton.on("reconnecting", lambda e: attempts.append(e["attempt"]))
            baton.on("error", errors.append)
            s = baton.session("given-up")
            await s.decide(events=[{"role": "monitor", "content": METRICS}])
            await asyncio.to_thread(self.server.stop)
            with self.assertRaises(BatonError) as e:
                await s.decide(events=[{"role": "monitor", "content": RESOLVED}])  # waits, then fails
            self.assertEqual(e.exception.code, "CONNECTION_LOST")
            self.assertEqual(attempts, [1, 2])
            self.assertEqual([x.code for x in errors], ["CONNECTION_LOST"])
            self.assertFalse(baton.connected)

    async def test_kill9_with_escalations_pending(self) -> None:
        server = self.server
        async with Recording(server.url, reconnect=FAST) as baton:
            called: List[str] = []
            iterated: List[str] = []
            baton.on_resolution(lambda r: called.append(r["id"]))

            async def iterate() -> None:
                async for r in baton.resolutions():
                    iterated.append(r["id"])

            iterator = asyncio.ensure_future(iterate())
            names = ["kill-1", "kill-2", "kill-3"]
            escalations = {}
            for name in names:
                d = await baton.session(name).decide(events=[{"role": "monitor", "content": ROLLBACK}])
                self.assertEqual(d["action"], "escalate")
                escalations[name] = d["escalation"]

            # Resolved while connected: pushed at once, not acknowledged yet.
            r1 = await asyncio.to_thread(server.resolve, escalations["kill-1"])
            got = await baton.session("kill-1").resolution(escalations["kill-1"], timeout=10)
            self.assertEqual((got["id"], got["outcome"]), (r1["id"], "execute"))

            # kill -9 while a turn and an ack are in flight (baton stopped: their frames are never read).
            baton.openable.clear()
            await asyncio.to_thread(server.pause)
            lost = asyncio.ensure_future(baton.session("kill-4").decide(events=[{"role": "monitor", "content": METRICS}]))
            acked = asyncio.ensure_future(baton.ack(r1["id"]))
            await wait_until(lambda: any(f.get("session") == "kill-4" for f in baton.sent)
                             and any(f["type"] == "ack" for f in baton.sent), "the turn and the ack to go out")
            await asyncio.to_thread(server.kill9)
            with self.assertRaises(BatonError) as e:
                await asyncio.wait_for(lost, 10)
            self.assertEqual(e.exception.code, "CONNECTION_LOST")
            self.assertFalse(acked.done())  # the ack is not confirmed: it goes again after the reconnect

            # Restarted on the same port and log; a reviewer resolves kill-2 while the client is away.
            await asyncio.to_thread(server.start)
            r2 = await asyncio.to_thread(server.resolve, escalations["kill-2"], "deny", "resolved while the agent was away")
            reconnected = asyncio.Event()
            baton.on("reconnected", lambda e: reconnected.set())
            baton.openable.set()
            await asyncio.wait_for(reconnected.wait(), 10)
            got = await baton.session("kill-2").resolution(escalations["kill-2"], timeout=10)
            self.assertEqual((got["id"], got["outcome"]), (r2["id"], "deny"))
            await asyncio.wait_for(acked, 10)
            self.assertEqual([f["resolution"] for f in baton.sent if f["type"] == "ack"], [r1["id"]] * 2)
            # Resolved while connected again: pushed to the resumed session.
            r3 = await asyncio.to_thread(server.resolve, escalations["kill-3"])
            await baton.session("kill-3").resolution(escalations["kill-3"], timeout=10)
            # r1 came again on the resume (its ack was lost with baton): delivered once all the same.
            resent = [f["resolution"]["id"] for f in baton.received if f["type"] == "resolution"]
            self.assertEqual(resent.count(r1["id"]), 2)
            await wait_until(lambda: len(iterated) == 3, "the iterator's three resolutions")
            self.assertEqual(called, [r1["id"], r2["id"], r3["id"]])
            self.assertEqual(iterated, called)

            for r in (r1, r2, r3):
                await baton.ack(r["id"])
            await baton.ack(r1["id"])  # idempotent
            # An ack returns once baton answered the resume behind it, which it does once the ack's
            # delivery row is written: the rows are there, and the kill below cannot lose them.
            acknowledged = sorted([r1["id"], r2["id"], r3["id"]])
            self.assertEqual(sorted(r["resolution"] for r in server.sql("SELECT resolution FROM deliveries")),
                             acknowledged, "the three delivery rows")

            # Another kill -9 and restart: nothing comes again.
            reconnected.clear()
            received = len(baton.received)
            await asyncio.to_thread(server.kill9)
            await asyncio.to_thread(server.start)
            await asyncio.wait_for(reconnected.wait(), 10)
            after = [f for f in baton.received[received:] if f["type"] == "resolution"]
            self.assertEqual(after, [])
            for name in names:
                self.assertEqual((await baton.session(name).resume())["resolutions"], 0)
            self.assertEqual(called, [r1["id"], r2["id"], r3["id"]])
            # The agent's next turn works on the restarted baton.
            d = await baton.session("kill-4").decide()
            self.assertEqual(d["action"], "execute")
        await asyncio.wait_for(iterator, 5)  # the iterator ends with the client
        self.assertEqual(len(iterated), 3)


if __name__ == "__main__":
    unittest.main()
