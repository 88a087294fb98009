"""The client against a scripted peer (websockets' server on 127.0.0.1), for orderings a real baton
produces only by chance: resolution frames that follow a `resumed` answer 50 ms later, and an ack
whose delivery row baton failed to write (it sends the resolution again with the confirming answer).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import unittest
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # clients/python: baton_client, not installed

import websockets  # noqa: E402

from baton_client import BatonClient  # noqa: E402


def resolution(rid: str) -> dict:
    return {"id": rid, "escalation": f"e-{rid}", "decision": f"d-{rid}", "session": "s1", "turn": 1,
            "outcome": "deny", "tool": None, "arguments": {}, "reason": "no", "reviewer": "r",
            "by": "reviewer", "forced": False, "created_at": "", "created_ms": 0}


class ScriptedPeer(unittest.IsolatedAsyncioTestCase):
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

    async def test_resume_returns_once_the_announced_resolutions_are_handed_over(self) -> None:
        async def on_frame(socket: Any, f: dict) -> None:
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


if __name__ == "__main__":
    unittest.main()
