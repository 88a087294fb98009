"""The client against a scripted peer (websockets' server on 127.0.0.1), for orderings a real baton
produces only by chance: resolution frames that follow a `resumed` answer 50 ms later, and an ack
whose delivery row baton failed to write (it sends the resolution again with the confirming answer);
and `end` of a session as baton answers it (ended, or UNKNOWN_SESSION after a restart).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import unittest
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # clients/python: baton_client, not installed

import websockets  # noqa: E402

from baton_client import BatonClient, BatonError  # noqa: E402


def resolution(rid: str) -> dict:
    return {"id": rid, "escalation": f"e-{rid}", "decision": f"d-{rid}", "session": "s1", "turn": 1,
            "outcome": "deny", "tool": None, "arguments": {}, "reason": "no", "reviewer": "r",
            "by": "reviewer", "forced": False, "created_at": "", "created_ms": 0}


class Peer(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.on_frame: Optional[Callable[[Any, dict], Any]] = None

        async def handler(socket: Any, *_: Any) -> None:  # websockets 10.4 passes the path too
            async for text in socket:
                if self.on_frame is not None:
                    await self.on_frame(socket, json.loads(text))

        self.server = await websockets.serve(handler, "127.0.0.1", 0)
        port = next(iter(self.server.sockets)).getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/agent"

    async def asyncTearDown(self) -> None:
        self.server.close()
        await self.server.wait_closed()


class ScriptedPeer(Peer):
    async def test_resume_returns_once_the_announced_resolutions_are_handed_over(self) -> None:
        async def on_frame(socket: Any, f: dict) -> None:
            if f["type"] == "end":  # by close()
                await socket.send(json.dumps({"type": "ended", "ref": f["id"], "session": f["session"]}))
            if f["type"] != "resume":
                return
            await socket.send(json.dumps({"type": "resumed", "ref": f["id"], "session": f["session"],
                                          "pending": [], "resolutions": 1}))
            await asyncio.sleep(0.05)
            await socket.send(json.dumps({"type": "resolution", "resolution": resolution("v-1")}))
        self.on_frame = on_frame
        async with BatonClient(self.url, reconnect=False) as baton:
            seen: list = []
            baton.on_resolution(lambda r: seen.append(r["id"]))
            self.assertEqual(await baton.session("s1").resume(), {"pending": [], "resolutions": 1})
            self.assertEqual(seen, ["v-1"])

    async def test_an_ack_whose_resolution_comes_again_with_its_confirmation_is_sent_again(self) -> None:
        acks = 0

        async def on_frame(socket: Any, f: dict) -> None:
            nonlocal acks
            if f["type"] == "ack":
                acks += 1
            if f["type"] != "resume":
                return
            # The first ack's row "failed": its answer comes with the resolution again.
            again = acks == 1
            await socket.send(json.dumps({"type": "resumed", "ref": f["id"], "session": f["session"],
                                          "pending": [], "resolutions": 1 if again else 0}))
            if again:
                await socket.send(json.dumps({"type": "resolution", "resolution": resolution("v-2")}))
        self.on_frame = on_frame
        async with BatonClient(self.url, reconnect=False) as baton:
            seen: list = []
            baton.on_resolution(lambda r: seen.append(r["id"]))
            await asyncio.wait_for(baton.ack("v-2"), 10)
            self.assertEqual(acks, 2, "the ack went again")
            self.assertEqual(seen, ["v-2"], "the resolution is handed over once")


class Ending(Peer):
    """`end` as baton answers it: `ended` (after a decision under way), or UNKNOWN_SESSION. The peer
    answers in tasks of its own, so that `log` has the frames in the order they arrived."""

    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        self.log: list = []
        self.turns: dict = {}
        self.decide_delay = 0.0
        self.end_delay = 0.0
        self.end_answer: Callable[[dict], Optional[dict]] = lambda f: {"type": "ended", "session": f["session"]}
        self.refuse_append = False
        self.on_frame = self.answer

    async def answer(self, socket: Any, f: dict) -> None:
        self.log.append(f)
        asyncio.ensure_future(self.answer_later(socket, f))

    async def answer_later(self, socket: Any, f: dict) -> None:
        if f["type"] == "decide":
            if self.refuse_append and "append" in f:
                await socket.send(json.dumps({"type": "error", "ref": f["id"], "code": "UNKNOWN_SESSION",
                                              "error": "send the full history"}))
                return
            turn = 1 if "history" in f else self.turns[f["session"]] + 1
            self.turns[f["session"]] = turn
            await asyncio.sleep(self.decide_delay)
            await socket.send(json.dumps({"type": "decision", "id": f["id"], "decision": f"d-{f['id']}",
                                          "session": f["session"], "turn": turn, "action": "finish"}))
        elif f["type"] == "end":
            await asyncio.sleep(self.end_delay)
            answer = self.end_answer(f)
            if answer is not None:
                await socket.send(json.dumps({**answer, "ref": f["id"]}))
                self.log.append({"answered": f["id"]})

    def kinds(self) -> list:
        return [f.get("type", "answered") for f in self.log]

    @staticmethod
    def say(text: str) -> list:
        return [{"role": "user", "content": text}]

    async def test_end_goes_out_after_the_decide_under_way_and_drops_the_session(self) -> None:
        self.decide_delay = 0.05
        async with BatonClient(self.url, reconnect=False) as baton:
            s = baton.session("e1")
            decided = asyncio.ensure_future(s.decide(events=self.say("hello")))
            await asyncio.sleep(0)  # the decide has the session first
            await s.end()
            self.assertEqual((await decided)["turn"], 1)
            self.assertEqual(self.kinds(), ["decide", "end", "answered"], "the end waited for the decision")
            self.assertEqual(self.log[1], {"type": "end", "session": "e1", "id": self.log[1]["id"]})
            await s.end()  # idempotent: nothing more is sent
            self.assertEqual(self.kinds().count("end"), 1)
            with self.assertRaises(RuntimeError):
                await s.decide(events=self.say("again"))
            fresh = baton.session("e1")
            self.assertIsNot(fresh, s)
            self.assertNotIn(s, baton.sessions)
            await fresh.decide(events=self.say("hello again"))
            self.assertEqual(self.log[-1]["history"], self.say("hello again"), "its first decide sends the whole history")
            self.assertNotIn("append", self.log[-1])

    async def test_unknown_session_on_end_is_success_other_errors_raise(self) -> None:
        self.end_answer = lambda f: ({"type": "error", "code": "UNKNOWN_SESSION", "error": "no session"}
                                     if f["session"] == "gone" else
                                     {"type": "error", "code": "INVALID_FRAME", "error": "session: too long"})
        async with BatonClient(self.url, reconnect=False) as baton:
            await baton.session("gone").end()
            with self.assertRaises(BatonError) as caught:
                await baton.session("bad").end()
            self.assertEqual(caught.exception.code, "INVALID_FRAME")

    async def test_a_new_session_of_the_name_waits_for_the_end(self) -> None:
        self.end_delay = 0.05
        async with BatonClient(self.url, reconnect=False) as baton:
            s = baton.session("e2")
            await s.decide(events=self.say("one"))
            ended = asyncio.ensure_future(s.end())
            await asyncio.sleep(0)
            decision = await baton.session("e2").decide(events=self.say("two"))
            await ended
            self.assertEqual(decision["turn"], 1)
            self.assertEqual(self.kinds(), ["decide", "end", "answered", "decide"])

    async def test_after_end_an_append_answered_unknown_session_is_sent_again_as_history(self) -> None:
        async with BatonClient(self.url, reconnect=False) as baton:
            await baton.session("e3").decide(events=self.say("one"))
            await baton.session("e3").end()
            s = baton.session("e3")
            await s.decide(events=self.say("two"))
            self.refuse_append = True  # baton forgot it (evicted): the next append is refused
            decision = await s.decide(events=self.say("three"))
            self.assertEqual(decision["turn"], 1, "baton took it as a new session")
            sent = [f"history {len(f['history'])}" if "history" in f else f"append {len(f['append'])}"
                    for f in self.log if f.get("type") == "decide"]
            self.assertEqual(sent, ["history 1", "history 1", "append 1", "history 2"])

    async def test_async_with_ends_the_session(self) -> None:
        async with BatonClient(self.url, reconnect=False) as baton:
            async with baton.session("e4") as s:
                self.assertEqual((await s.decide(events=self.say("hi")))["turn"], 1)
                self.assertEqual(self.kinds(), ["decide"])
            self.assertEqual(self.kinds(), ["decide", "end", "answered"])
            self.assertEqual(self.log[1]["session"], "e4")

    async def test_close_ends_the_sessions_first_within_request_timeout(self) -> None:
        self.end_answer = lambda f: None if f["session"] == "mute" else {"type": "ended", "session": f["session"]}
        baton = BatonClient(self.url, reconnect=False, request_timeout=0.3)
        await baton.connect()
        await baton.session("c1").decide(events=self.say("one"))
        await baton.session("c2").decide(events=self.say("two"))
        await baton.close()
        self.assertEqual(sorted(f["session"] for f in self.log if f.get("type") == "end"), ["c1", "c2"])
        self.assertEqual(self.kinds().count("answered"), 2, "both answered before the connection closed")

        slow = BatonClient(self.url, reconnect=False, request_timeout=0.3)
        await slow.connect()
        slow.session("mute")
        started = time.monotonic()
        await slow.close()
        waited = time.monotonic() - started
        self.assertTrue(0.25 <= waited < 2, f"close() waited for the unanswered end, within the bound ({waited:.2f} s)")


if __name__ == "__main__":
    unittest.main()
