"""BatonClient: one WebSocket to baton's /v1/agent carrying many sessions (docs/protocol.md)."""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import json
import logging
import os
import random
from dataclasses import dataclass
from typing import (Any, AsyncIterator, Awaitable, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Set, TypeVar, Union)

from . import _transport
from .errors import CLOSED, CONNECTION_LOST, RETRYABLE, TIMEOUT, BatonError
from .session import Session, valid_session_name
from .frames import Resolution, ToolResultFrame

log = logging.getLogger("baton_client")

Frame = Dict[str, Any]
Callback = Callable[[Any], Union[None, Awaitable[None]]]
_Client = TypeVar("_Client", bound="BatonClient")
EVENTS = ("resolution", "tool_result", "reconnecting", "reconnected", "error")

# Tool results kept for a later baton_ran() (a frame can arrive before it is asked for).
_KEPT_TOOL_RESULTS = 4096


@dataclass(frozen=True)
class Reconnect:
    """Reconnecting after a dropped connection: the n-th attempt waits
    min(max_delay, initial_delay * 2**(n-1)) seconds, less a random share of up to half (jitter).
    `max_attempts` None: no limit."""

    initial_delay: float = 0.1
    max_delay: float = 5.0
    max_attempts: Optional[int] = None


class _Gate:
    """At most `size` holders; the others wait in the order they came (back-pressure)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._waiters: Deque["asyncio.Future[None]"] = collections.deque()

    @property
    def held(self) -> int:
        return self.size - self._free

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            else:  # granted, then cancelled before it ran: pass the place on
                self.release()
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the place goes to it: _free stays
                return
        self._free += 1


class _Pending:
    """A frame sent that awaits its answer (or, for an ack, only a possible error)."""

    __slots__ = ("future", "on_answer")

    def __init__(self, future: "asyncio.Future[Frame]", on_answer: Optional[Callable[[Frame], None]]) -> None:
        self.future = future
        self.on_answer = on_answer


class _Resolutions:
    """`async for resolution in client.resolutions()`: each resolution received from the call on,
    until the client closes."""

    def __init__(self, client: "BatonClient") -> None:
        self._client = client
        self._queue: "asyncio.Queue[Optional[Resolution]]" = asyncio.Queue()
        client._streams.add(self._queue)
        if client._closing or client._failed is not None:
            self._queue.put_nowait(None)

    def __aiter__(self) -> "_Resolutions":
        return self

    async def __anext__(self) -> Resolution:
        item = await self._queue.get()
        if item is None:
            self._client._streams.discard(self._queue)
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """Stops receiving (what was queued is dropped)."""
        self._client._streams.discard(self._queue)
        self._queue.put_nowait(None)


def _fail_all(waiters_by_key: Mapping[str, Sequence["asyncio.Future[Any]"]], error: BatonError) -> None:
    """Fails every waiter not answered yet."""
    for waiters in list(waiters_by_key.values()):
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)


class BatonClient:
    """One connection to ws://HOST:PORT/v1/agent, many sessions over it.

        async with BatonClient("ws://127.0.0.1:8470/v1/agent") as baton:
            session = baton.session("ticket-1")
            session.add({"role": "user", "content": "I was charged twice"})
            decision = await session.decide()

    api_key: sent as a bearer token (default: $BATON_API_KEY; none: no header).
    reconnect: True (Reconnect()), a Reconnect, or False (a dropped connection stays dropped).
    request_timeout: seconds a frame waits for its answer (and a request for a connection) before
        it fails with TIMEOUT.
    max_in_flight: frames awaiting an answer at once; more wait, in the order they came.
    retries: how many times a frame refused with RATE_LIMITED, OVERLOADED, LOG_BACKLOG, LOG_UNAVAILABLE or
        TOO_MANY_SESSIONS is sent again, each after the error's retry_after_ms.
    """

    def __init__(self, url: str, api_key: Optional[str] = None, *, reconnect: Union[bool, Reconnect] = True,
                 request_timeout: float = 60.0, max_in_flight: int = 64, retries: int = 5,
                 open_timeout: float = 10.0, max_size: Optional[int] = 2 ** 24) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.url = url
        self.api_key = api_key if api_key is not None else os.environ.get("BATON_API_KEY")
        self.reconnect: Optional[Reconnect] = (Reconnect() if reconnect is True else reconnect) or None
        self.request_timeout = request_timeout
        self.max_in_flight = max_in_flight
        self.retries = retries
        self.open_timeout = open_timeout
        self.max_size = max_size

        self._ids = itertools.count(1)
        self._sessions: Dict[str, Session] = {}
        self._ending: Dict[str, "asyncio.Future[None]"] = {}  # ends under way, by session name
        self._gate = _Gate(max_in_flight)
        self._pending: Dict[Any, _Pending] = {}
        # A resume answered with n resolutions completes once those n frames (right behind it) are read.
        self._resume_hold: Optional[List[Any]] = None  # [pending, answer, frames still to come]
        self._paused_until = 0.0  # after RATE_LIMITED nothing is sent before this (loop time)

        self._conn: Any = None
        self._epoch = 0  # one more for each connection
        self._ready = asyncio.Event()  # connected, and every session resumed after a reconnect
        self._stopped = asyncio.Event()  # closing: sleeps end early
        self._closing = False
        self._failed: Optional[BatonError] = None  # reconnecting gave up
        self._reader: Optional["asyncio.Task[None]"] = None
        self._tasks: Set["asyncio.Task[Any]"] = set()

        self._listeners: Dict[str, List[Callback]] = {name: [] for name in EVENTS}
        self._streams: Set["asyncio.Queue[Optional[Resolution]]"] = set()
        self._seen: Set[str] = set()  # resolution ids delivered (once per client lifetime)
        self._by_escalation: Dict[str, Resolution] = {}
        self._resolution_waiters: Dict[str, List["asyncio.Future[Resolution]"]] = {}
        self._resolution_session: Dict[str, str] = {}  # resolution id -> session name
        self._acked: Set[str] = set()  # acks confirmed
        self._acks: Dict[str, "asyncio.Future[None]"] = {}  # acks under way
        self._tool_results: "collections.OrderedDict[str, ToolResultFrame]" = collections.OrderedDict()
        self._tool_waiters: Dict[str, List["asyncio.Future[ToolResultFrame]"]] = {}
        self._awaiting_tool: Dict[str, Session] = {}  # decision id -> session, for tools baton runs
        self._tool_events_applied: Set[str] = set()  # decisions whose run joined a session's history
        self._tool_results_seen: "collections.OrderedDict[str, None]" = collections.OrderedDict()

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self: _Client) -> _Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def connect(self) -> None:
        """Opens the connection. Raises BatonError: the refusal's code (UNAUTHORIZED,
        ORIGIN_REFUSED, ...) or CONNECT_FAILED."""
        if self._closing:
            raise BatonError(CLOSED, "the client is closed")
        if self._failed is not None:
            raise self._failed
        if self._reader is not None:
            return
        self._conn = await self._open()
        self._epoch += 1
        self._ready.set()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def close(self) -> None:
        """Ends the sessions (when connected; waiting at most request_timeout for baton's answers),
        then closes the connection and stops reconnecting; what still waits fails with CLOSED."""
        if not self._closing and self.connected:
            # baton frees them now rather than after its idle timeout (server.session_idle_s).
            for session in list(self._sessions.values()):
                session._end_soon()
            if self._ending:
                await asyncio.wait(list(self._ending.values()), timeout=self.request_timeout)
        if self._closing:
            if self._reader is not None:
                await asyncio.gather(self._reader, return_exceptions=True)
            return
        self._closing = True
        self._stopped.set()
        self._ready.set()  # wakes the requests waiting for a connection: they see CLOSED
        conn = self._conn
        self._fail_waiters(BatonError(CLOSED, "the client was closed"), everything=True)
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # closing a connection that is already gone
                pass
        elif self._reader is not None:
            self._reader.cancel()  # between connections: no attempt is waited for
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for stream in list(self._streams):
            stream.put_nowait(None)

    @property
    def connected(self) -> bool:
        """Connected, and (after a reconnect) every session resumed."""
        return self._conn is not None and self._ready.is_set() and not self._closing

    @property
    def in_flight(self) -> int:
        """Frames awaiting an answer now (at most max_in_flight)."""
        return self._gate.held

    # ---------------------------------------------------------------- sessions and events

    def session(self, name: str) -> Session:
        """The session `name` (1-128 characters of A-Za-z0-9_.:@-): the same object each time."""
        session = self._sessions.get(name)
        if session is None:
            if not valid_session_name(name):
                raise ValueError(f"{name!r} is not a session name: 1-128 characters of A-Za-z0-9_.:@-")
            session = self._sessions[name] = Session(self, name, self._ending.get(name))
        return session

    @property
    def sessions(self) -> List[Session]:
        return list(self._sessions.values())

    def on(self, event: str, callback: Callback) -> Callable[[], None]:
        """Calls `callback(value)` on each `event`; returns a function that removes it.

        resolution: a Resolution, each id once per client lifetime (also those sent again after a
            reconnect). tool_result: a ToolResultFrame of a tool baton ran. reconnecting:
            {"attempt", "delay" (seconds), "error"}. reconnected: {"sessions": n resumed}.
            error: a BatonError nothing waited for (an error frame without ref, a resume after a
            reconnect that failed, reconnecting given up).
        A coroutine function's calls run as tasks."""
        if event not in self._listeners:
            raise ValueError(f"unknown event {event!r}: one of {', '.join(EVENTS)}")
        self._listeners[event].append(callback)

        def remove() -> None:
            if callback in self._listeners[event]:
                self._listeners[event].remove(callback)

        return remove

    def on_resolution(self, callback: Callback) -> Callable[[], None]:
        """on("resolution", callback)."""
        return self.on("resolution", callback)

    def resolutions(self) -> AsyncIterator[Resolution]:
        """`async for r in client.resolutions()`: each resolution received from now on (each id
        once per client lifetime), until the client closes."""
        return _Resolutions(self)

    async def ack(self, resolution_id: str) -> None:
        """Acknowledges a resolution: baton sends it no more. Returns once baton has it (the
        answer to a `resume` sent after the `ack`: an error for the ack would come first).
        Idempotent. Across a reconnect it is sent again until confirmed."""
        if resolution_id in self._acked:
            return
        future = self._acks.get(resolution_id)
        if future is None:
            future = self._acks[resolution_id] = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieve)
            self._spawn(self._ack_until_confirmed(resolution_id, future))
        await asyncio.shield(future)

    # ---------------------------------------------------------------- requests

    async def _request(self, build: Callable[[], Union[Frame, List[Frame]]], *,
                       on_answer: Optional[Callable[[Frame], None]] = None, internal: bool = False) -> Frame:
        """Sends what `build()` makes (a frame, or frames of which the last one is answered) and
        returns the answer; error frames raise BatonError, retryable ones are sent again."""
        left = self.retries
        while True:
            answer, errors = await self._exchange(build, on_answer, internal)
            error = errors[0] if errors else (answer if answer.get("type") == "error" else None)
            if error is None:
                return answer
            failure = BatonError.from_frame(error)
            if failure.code not in RETRYABLE or left <= 0:
                raise failure
            left -= 1
            delay = (failure.retry_after_ms if isinstance(failure.retry_after_ms, (int, float)) else 1000) / 1000
            if failure.code == "RATE_LIMITED":
                # The connection's (or the key's) rate: every frame waits, not only this one.
                loop = asyncio.get_running_loop()
                self._paused_until = max(self._paused_until, loop.time() + delay)
            await self._sleep(delay)

    async def _exchange(self, build: Callable[[], Union[Frame, List[Frame]]],
                        on_answer: Optional[Callable[[Frame], None]], internal: bool) -> "tuple[Frame, List[Frame]]":
        loop = asyncio.get_running_loop()
        while True:
            await self._usable(internal)
            await self._gate.acquire()
            try:
                wait = self._paused_until - loop.time()
                if wait > 0:
                    await self._sleep(wait)
            except BaseException:
                self._gate.release()
                raise
            if self._can_send(internal):
                break
            self._gate.release()  # the connection went while this waited: wait for the next one
        conn, ids = self._conn, []
        try:
            built = build()
            frames = built if isinstance(built, list) else [built]
            texts = []
            futures = []
            for i, frame in enumerate(frames):
                frame_id = next(self._ids)
                texts.append(json.dumps({**frame, "id": frame_id}))
                future: "asyncio.Future[Frame]" = loop.create_future()
                future.add_done_callback(_retrieve)
                ids.append(frame_id)
                futures.append(future)
                self._pending[frame_id] = _Pending(future, on_answer if i == len(frames) - 1 else None)
            try:
                for text in texts:
                    await conn.send(text)
            except _transport.ConnectionClosed:
                raise BatonError(CONNECTION_LOST, "the connection dropped before the frame went out") from None
            try:
                answer = await asyncio.wait_for(asyncio.shield(futures[-1]), self.request_timeout)
            except asyncio.TimeoutError:
                raise BatonError(TIMEOUT, f"no answer within {self.request_timeout:g} s") from None
            return answer, [f.result() for f in futures[:-1] if f.done() and not f.exception()]
        finally:
            for frame_id in ids:
                self._pending.pop(frame_id, None)
            self._gate.release()

    def _can_send(self, internal: bool) -> bool:
        return self._conn is not None and not self._closing and (internal or self._ready.is_set())

    async def _usable(self, internal: bool) -> None:
        """Returns once a frame may go out (internal: the resumes of a reconnect, which go before
        the rest)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        while True:
            if self._closing:
                raise BatonError(CLOSED, "the client is closed")
            if self._failed is not None:
                raise BatonError(CONNECTION_LOST, f"the connection is lost: {self._failed}")
            if self._reader is None:
                raise BatonError(CLOSED, "the client is not connected: connect() first (or `async with`)")
            if internal:
                if self._conn is None:
                    raise BatonError(CONNECTION_LOST, "the connection dropped")
                return
            if self._can_send(False):
                return
            try:
                await asyncio.wait_for(self._ready.wait(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise BatonError(TIMEOUT, f"no connection within {self.request_timeout:g} s") from None
            # Checked again above: closed, failed, or dropped again before this ran.

    async def _sleep(self, seconds: float) -> None:
        """Sleeps, or raises CLOSED when the client closes meanwhile."""
        if seconds > 0:
            try:
                await asyncio.wait_for(self._stopped.wait(), seconds)
            except asyncio.TimeoutError:
                pass
        if self._closing:
            raise BatonError(CLOSED, "the client is closed")

    # ---------------------------------------------------------------- acks

    async def _ack_until_confirmed(self, resolution_id: str, future: "asyncio.Future[None]") -> None:
        try:
            unwritten = 0
            while True:
                # The resolution's own session; any (the ack's error or not comes first either way).
                session = self._resolution_session.get(resolution_id) or next(iter(self._sessions), "baton-client")
                try:
                    answer = await self._request(lambda: [{"type": "ack", "resolution": resolution_id},
                                                          {"type": "resume", "session": session}])
                except BatonError as e:
                    if e.code == CONNECTION_LOST and self.reconnect is not None and self._failed is None:
                        continue  # sent again on the next connection
                    raise
                if resolution_id in answer.get(_RESENT, ()) and unwritten < self.retries:
                    # Baton could not write the ack's row and sent the resolution again with the
                    # answer: acknowledged again.
                    unwritten += 1
                    continue
                self._acked.add(resolution_id)
                future.set_result(None)
                return
        except BaseException as e:
            if not future.done():
                future.set_exception(e if isinstance(e, BatonError) else BatonError(CLOSED, "the client was closed"))
            if not isinstance(e, (BatonError, asyncio.CancelledError)):
                raise
        finally:
            self._acks.pop(resolution_id, None)

    # ---------------------------------------------------------------- ending sessions

    def _forget(self, session: Session, ending: "asyncio.Future[None]") -> None:
        """Drops an ending session; a new session of its name waits for `ending`."""
        if self._sessions.get(session.name) is session:
            del self._sessions[session.name]
        self._ending[session.name] = ending

        def ended(future: "asyncio.Future[None]") -> None:
            if self._ending.get(session.name) is future:
                del self._ending[session.name]

        ending.add_done_callback(ended)

    async def _end(self, name: str) -> None:
        while True:
            try:
                await self._request(lambda: {"type": "end", "session": name})
                return
            except BatonError as e:
                if e.code == "UNKNOWN_SESSION":
                    return  # baton does not have it (a restart, or it never decided): nothing is left to end
                if e.code == CONNECTION_LOST and self.reconnect is not None and self._failed is None \
                        and not self._closing:
                    continue  # an end is idempotent: sent again on the next connection
                raise

    # ---------------------------------------------------------------- resolutions and tool results

    async def _resolution(self, escalation: str, timeout: Optional[float]) -> Resolution:
        known = self._by_escalation.get(escalation)
        if known is not None:
            return known
        if self._closing:
            raise BatonError(CLOSED, "the client is closed")
        resolution: Resolution = await _wait_for(self._resolution_waiters, escalation, timeout,
                                                 f"no resolution of {escalation}")
        return resolution

    async def _baton_ran(self, decision: Mapping[str, Any]) -> ToolResultFrame:
        decision_id = decision["decision"]
        frame = self._tool_results.pop(decision_id, None)
        if frame is not None:
            return frame
        if decision_id not in self._awaiting_tool:
            if decision.get("executor") in (None, "agent") or decision.get("action", "execute") != "execute":
                raise ValueError(f"baton runs no tool for decision {decision_id}: its action is "
                                 f"{decision.get('action')}, its executor {decision.get('executor')}")
            if self._closing:
                raise BatonError(CLOSED, "the client is closed")
            raise BatonError(CONNECTION_LOST, f"the connection that would get the tool result of {decision_id} is gone")
        frame = await _wait_for(self._tool_waiters, decision_id, self.request_timeout, f"no tool result for {decision_id}")
        self._tool_results.pop(decision_id, None)
        return frame

    # ---------------------------------------------------------------- the reader

    async def _read(self) -> None:
        while True:
            conn = self._conn
            cause: Optional[BaseException] = None
            try:
                async for message in conn:
                    if isinstance(message, str):
                        self._dispatch(message)
            except _transport.ConnectionClosed as e:
                cause = e
            except Exception as e:  # the transport failed otherwise (reset, ...)
                cause = e
            if self._closing:
                return
            self._lost(cause)
            if self.reconnect is None:
                self._give_up(BatonError(CONNECTION_LOST, f"the connection dropped ({_why(cause)}); reconnect is off"))
                return
            conn = await self._reconnect(cause)
            if conn is None:
                return
            if self._closing:
                await conn.close()
                return
            self._conn = conn
            self._epoch += 1
            self._spawn(self._resync(self._epoch))

    def _dispatch(self, text: str) -> None:
        try:
            frame = json.loads(text)
        except ValueError:
            log.warning("baton sent a frame that is not JSON: %.200s", text)
            return
        if not isinstance(frame, dict):
            return
        try:
            self._on_frame(frame)
        except Exception:  # a bug here must not stop the reader
            log.exception("baton_client: handling a %s frame failed", frame.get("type"))

    def _on_frame(self, frame: Frame) -> None:
        kind = frame.get("type")
        if kind == "resolution":
            resolution = frame.get("resolution")
            if isinstance(resolution, dict):
                self._on_resolution(resolution)  # type: ignore[arg-type]
            hold = self._resume_hold
            if hold is not None:
                if isinstance(resolution, dict):
                    hold[1].setdefault(_RESENT, []).append(resolution.get("id"))
                hold[2] -= 1
                if hold[2] <= 0:
                    self._resume_hold = None
                    if not hold[0].future.done():
                        hold[0].future.set_result(hold[1])
            return
        if kind == "tool_result" and "ref" not in frame:
            self._on_tool_result(frame)
            return
        key = frame["ref"] if "ref" in frame else frame.get("id")
        pending = self._pending.get(key) if key is not None else None
        if pending is None or pending.future.done():
            if kind == "error":
                self._emit("error", BatonError.from_frame(frame))
            return
        if kind == "error":
            pending.future.set_result(frame)
            return
        if pending.on_answer is not None:
            pending.on_answer(frame)
        if kind == "decision":
            self._on_decision(frame)
        if kind == "resumed" and int(frame.get("resolutions") or 0) > 0:
            self._resume_hold = [pending, dict(frame), int(frame["resolutions"])]
            return
        pending.future.set_result(frame)

    def _on_decision(self, decision: Frame) -> None:
        session = self._sessions.get(str(decision.get("session")))
        if (session is not None and decision.get("action") == "execute"
                and decision.get("executor") not in (None, "agent") and decision.get("tool")):
            self._awaiting_tool[decision["decision"]] = session

    def _on_resolution(self, resolution: Resolution) -> None:
        resolution_id = resolution.get("id")
        if not isinstance(resolution_id, str):
            return
        # With API keys baton names the session KEY/NAME; the client knows it as NAME.
        name = str(resolution.get("session", "")).rsplit("/", 1)[-1]
        if name in self._sessions:
            self._resolution_session[resolution_id] = name
            # A tool baton runs for it: its tool_result (sent with the resolution on every resume
            # until acknowledged) puts the run into the session's history, once, also after a
            # reconnect.
            if resolution.get("outcome") == "execute" and resolution.get("executor") not in (None, "agent") \
                    and resolution.get("decision") and resolution["decision"] not in self._tool_events_applied:
                self._awaiting_tool[resolution["decision"]] = self._sessions[name]
        if resolution_id in self._seen:
            # Sent again: not acknowledged yet, or an ack baton lost (a crash before its row):
            # then it is acknowledged again.
            if resolution_id in self._acked:
                self._acked.discard(resolution_id)
                self._spawn(self.ack(resolution_id))
            return
        self._seen.add(resolution_id)
        escalation = resolution.get("escalation")
        if isinstance(escalation, str):
            self._by_escalation[escalation] = resolution
            for waiter in self._resolution_waiters.pop(escalation, []):
                if not waiter.done():
                    waiter.set_result(resolution)
        for stream in list(self._streams):
            stream.put_nowait(resolution)
        self._emit("resolution", resolution)

    def _on_tool_result(self, frame: Frame) -> None:
        decision_id = str(frame.get("decision"))
        again = decision_id in self._tool_results_seen
        self._tool_results_seen[decision_id] = None
        while len(self._tool_results_seen) > 16 * _KEPT_TOOL_RESULTS:
            self._tool_results_seen.popitem(last=False)
        session = self._awaiting_tool.pop(decision_id, None)
        if session is not None:
            session._baton_event(frame)
            self._tool_events_applied.add(decision_id)
        waiters = self._tool_waiters.pop(decision_id, [])
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(frame)  # type: ignore[arg-type]
        else:
            self._tool_results[decision_id] = frame  # type: ignore[assignment]
            while len(self._tool_results) > _KEPT_TOOL_RESULTS:
                self._tool_results.popitem(last=False)
        if not again:  # a resolution's run comes again with it on each resume: emitted once
            self._emit("tool_result", frame)

    # ---------------------------------------------------------------- dropped connections

    def _lost(self, cause: Optional[BaseException]) -> None:
        self._conn = None
        self._ready.clear()
        error = BatonError(CONNECTION_LOST, f"the connection dropped ({_why(cause)})")
        self._fail_waiters(error, everything=False)
        for session in self._sessions.values():
            session._needs_history = True

    def _fail_waiters(self, error: BatonError, everything: bool) -> None:
        """Fails what cannot be answered any more: the requests in flight and the tool results
        (their connection is gone); with `everything` also resolutions and acks (closing)."""
        self._resume_hold = None
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_exception(error)
        _fail_all(self._tool_waiters, error)
        self._awaiting_tool.clear()
        if everything:
            _fail_all(self._resolution_waiters, error)
            for future in list(self._acks.values()):
                if not future.done():
                    future.set_exception(error)

    def _give_up(self, error: BatonError) -> None:
        self._failed = error
        self._ready.set()  # wakes the requests waiting for a connection: they see the failure
        self._fail_waiters(error, everything=True)
        for stream in list(self._streams):
            stream.put_nowait(None)
        self._emit("error", error)

    async def _reconnect(self, cause: Optional[BaseException]) -> Any:
        assert self.reconnect is not None
        policy = self.reconnect
        error: Optional[BaseException] = cause
        for attempt in itertools.count(1):
            if policy.max_attempts is not None and attempt > policy.max_attempts:
                self._give_up(BatonError(CONNECTION_LOST, f"no connection after {policy.max_attempts} attempts: "
                                                          f"{_why(error)}"))
                return None
            base = min(policy.max_delay, policy.initial_delay * 2 ** min(attempt - 1, 30))
            delay = base * (1 - random.random() / 2)
            self._emit("reconnecting", {"attempt": attempt, "delay": delay, "error": error})
            try:
                await self._sleep(delay)
                return await self._open()
            except BatonError as e:
                if self._closing:
                    return None
                error = e
        return None  # not reached

    async def _resync(self, epoch: int) -> None:
        """After a reconnect: every session is resumed (its unacknowledged resolutions come again,
        each delivered once) before other frames go out; acks under way go again on their own."""
        names = list(self._sessions)

        async def resume(name: str) -> None:
            try:
                await self._request(lambda: {"type": "resume", "session": name}, internal=True)
            except BatonError as e:
                if e.code not in (CONNECTION_LOST, CLOSED):
                    self._emit("error", e)
                    return
                raise

        results = await asyncio.gather(*(resume(name) for name in names), return_exceptions=True)
        if self._epoch != epoch or self._conn is None or self._closing:
            return  # dropped again meanwhile: the next connection resumes them
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, BatonError):
                log.error("baton_client: resuming a session failed: %r", result)
        self._ready.set()
        self._emit("reconnected", {"sessions": len(names)})

    # ---------------------------------------------------------------- helpers

    async def _open(self) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        return await _transport.open_connection(self.url, headers, self.max_size, self.open_timeout)

    def _spawn(self, coroutine: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: "asyncio.Task[Any]") -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None \
                and not isinstance(task.exception(), BatonError):
            log.error("baton_client: a background task failed: %r", task.exception())

    def _emit(self, event: str, value: Any) -> None:
        for callback in list(self._listeners[event]):
            try:
                result = callback(value)
                if inspect.isawaitable(result):
                    self._spawn(result)
            except Exception:
                log.exception("baton_client: a %s callback failed", event)



# The ids of the resolution frames that followed a `resumed` answer, kept on the answer (internal).
_RESENT = "_resolutions_that_followed"

async def _wait_for(waiters_by_key: Dict[str, List["asyncio.Future[Any]"]], key: str, timeout: Optional[float],
                    what: str) -> Any:
    """Waits for the frame that settles `key`'s future in `waiters_by_key` (None: no limit); TIMEOUT
    names `what`. The future leaves the map however the wait ends."""
    future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
    future.add_done_callback(_retrieve)
    waiters_by_key.setdefault(key, []).append(future)
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout)
    except asyncio.TimeoutError:
        raise BatonError(TIMEOUT, f"{what} within {timeout:g} s") from None
    finally:
        waiters = waiters_by_key.get(key)
        if waiters and future in waiters:
            waiters.remove(future)
            if not waiters:
                del waiters_by_key[key]

def _retrieve(future: "asyncio.Future[Any]") -> None:
    """Marks a future's exception as seen: nothing may be waiting for it any more."""
    if not future.cancelled():
        future.exception()


def _why(cause: Optional[BaseException]) -> str:
    if cause is None:
        return "closed by the server"
    code = getattr(cause, "code", None)
    if code is None:
        rcvd = getattr(cause, "rcvd", None)
        code = getattr(rcvd, "code", None)
    return f"{type(cause).__name__}: {cause}" if code is None else f"close code {code}: {cause}"
