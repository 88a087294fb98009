"""Session: one named conversation of the agent, its history, and the turns it asks baton for."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional

from .errors import CLOSED, CONNECTION_LOST, TIMEOUT, BatonError
from .frames import AgentEvent, Decision, Proposal, Question, Resolution, Resumed, ToolResultFrame

if TYPE_CHECKING:
    from .client import BatonClient

_SESSION_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


def valid_session_name(name: str) -> bool:
    """What baton accepts as a session name: 1-128 characters of A-Za-z0-9_.:@-."""
    return isinstance(name, str) and _SESSION_NAME.fullmatch(name) is not None


class Session:
    """A session of a BatonClient (`client.session(name)`), the same object for the same name.

    It keeps the history as baton does: the first `decide` (and the first after a reconnect) sends
    all of it as `history`, later ones only what is new as `append`. One decision at a time: a
    second `decide` waits for the first. `async with client.session(name) as s:` ends it on exit."""

    def __init__(self, client: "BatonClient", name: str, after: "Optional[asyncio.Future[None]]" = None) -> None:
        self.client = client
        self.name = name
        # The end of an earlier session of this name, still under way: nothing goes out before it.
        self._after = after
        self._ending: "Optional[asyncio.Future[None]]" = None
        self._ended = False  # set under the lock: decides that come after the end are refused
        self._history: List[AgentEvent] = []
        # How many events of _history baton holds (in this order), and whether it holds them at
        # all: after a (re)connect it holds nothing this client knows of, so `history` goes next.
        self._server_has = 0
        self._needs_history = True
        self._lock = asyncio.Lock()

    @property
    def history(self) -> List[AgentEvent]:
        """The session's events: those baton has, then those the next decide sends (a copy)."""
        return list(self._history)

    def add(self, event: AgentEvent) -> None:
        """An event for the next decide."""
        if not isinstance(event, Mapping):
            raise TypeError(f"an event is a JSON object (a dict), not {type(event).__name__}")
        self._history.append(dict(event))

    async def decide(self, events: Optional[Iterable[AgentEvent]] = None, proposal: Optional[Proposal] = None,
                     questions: Optional[Dict[str, Question]] = None) -> Decision:
        """Baton's decision for the next turn, with `events` added first. Raises BatonError with the
        error frame's code; an `append` answered UNKNOWN_SESSION (baton restarted or forgot the
        session) is sent once more as the full `history`. RuntimeError once the session was ended."""
        for event in events or ():
            self.add(event)
        async with self._lock:
            if self._ended and not self.client._closing:
                raise RuntimeError(f"session {self.name} was ended: client.session({self.name!r}) starts it again")
            await self._after_earlier_end()
            resent = False
            while True:
                sent: Dict[str, Any] = {}

                def build() -> Dict[str, Any]:
                    # Built when it goes out: a reconnect while it waited makes it a full history.
                    frame: Dict[str, Any] = {"type": "decide", "session": self.name}
                    if self._needs_history:
                        frame["history"] = list(self._history)
                    else:
                        frame["append"] = self._history[self._server_has:]
                    if proposal is not None:
                        frame["proposal"] = proposal
                    if questions is not None:
                        frame["questions"] = questions
                    sent["full"] = self._needs_history
                    sent["count"] = len(self._history)
                    return frame

                def decided(decision: Dict[str, Any]) -> None:
                    # Run by the reader as the decision arrives, before any frame after it (a
                    # tool_result whose event baton appended right after these events).
                    self._server_has = sent["count"]
                    self._needs_history = False

                try:
                    return await self.client._request(build, on_answer=decided)  # type: ignore[return-value]
                except BatonError as e:
                    if e.code == "UNKNOWN_SESSION" and not sent.get("full", True) and not resent:
                        self._needs_history = True
                        resent = True
                        continue
                    if e.code in (CONNECTION_LOST, TIMEOUT, CLOSED):
                        # The turn may have been decided: the next one replaces what baton has.
                        self._needs_history = True
                    raise
                except BaseException:
                    self._needs_history = True
                    raise

    async def tool_result(self, decision: Mapping[str, Any], ok: bool, output: Any) -> None:
        """Reports a tool the agent ran (executor `agent`) for `decision` (a Decision, or a
        Resolution whose person chose an agent-run tool) and waits for baton's ack. The event
        {"role": "tool", "tool", "ok", "output"} joins the history for the next decide."""
        frame = {"type": "tool_result", "decision": decision["decision"], "ok": bool(ok), "output": output}
        await self.client._request(lambda: dict(frame))
        self._history.append({"role": "tool", "tool": decision.get("tool"), "ok": bool(ok), "output": output})

    async def baton_ran(self, decision: Mapping[str, Any]) -> ToolResultFrame:
        """The tool_result frame of a tool baton ran itself (executor `http` or `command`) for
        `decision` (or for a Resolution's execute). Its `event` is already in the history."""
        return await self.client._baton_ran(decision)

    async def resolution(self, escalation: str, timeout: Optional[float] = None) -> Resolution:
        """The resolution of `escalation` (an e-... id), received already or to come; TIMEOUT
        after `timeout` seconds (None: no limit)."""
        return await self.client._resolution(escalation, timeout)

    async def resume(self) -> Resumed:
        """Takes the session's resolutions on this connection: the ids of its pending escalations
        and how many resolutions baton sent again (they go to the resolution callbacks and
        iterators, each id once; they have been received when this returns)."""
        answer = await self.client._request(lambda: {"type": "resume", "session": self.name})
        return {"pending": list(answer.get("pending") or []), "resolutions": int(answer.get("resolutions") or 0)}

    async def end(self) -> None:
        """Ends the session: baton forgets its history (its decisions stay in the log, its
        escalations are still resolved and come on `resume`). A decide under way is answered first.
        Returns on baton's `ended`, and on UNKNOWN_SESSION too (baton restarted, or the session
        never decided: nothing is left to end); sent again after a reconnect (it is idempotent).
        The client drops this object at once: `client.session(name)` is then a new session whose
        first decide sends the whole history; a decide on this one raises RuntimeError. A second
        call waits for the first one's end."""
        await asyncio.shield(self._end_soon())

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.end()

    def _end_soon(self) -> "asyncio.Future[None]":
        """The end, started once (a task: a caller cancelled meanwhile does not stop it)."""
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())
            # close() starts ends that nobody awaits: their failures are not to be reported as unretrieved.
            self._ending.add_done_callback(lambda f: None if f.cancelled() else f.exception())
            self.client._forget(self, self._ending)
        return self._ending

    async def _end(self) -> None:
        async with self._lock:
            self._ended = True
            await self._after_earlier_end()
            await self.client._end(self.name)

    async def _after_earlier_end(self) -> None:
        if self._after is not None:
            await asyncio.wait([self._after])
            self._after = None

    def _baton_event(self, frame: Mapping[str, Any]) -> None:
        """A tool_result frame of a tool baton ran for this session."""
        event = frame.get("event")
        if isinstance(event, dict):
            # Baton appended it after the decided turn's events: it holds it in that place.
            self._history.insert(self._server_has, event)
            self._server_has += 1
        else:
            # A resolution's run: baton's history does not have it, the next decide sends it.
            self._history.append({"role": "tool", "tool": frame.get("tool"), "ok": frame.get("ok"),
                                  "output": frame.get("output")})

    def __repr__(self) -> str:
        return f"Session({self.name!r}, {len(self._history)} events)"
