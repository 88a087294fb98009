"""BatonError: an error frame of the protocol, or the client's own failure."""

from __future__ import annotations

from typing import Any, Dict, Optional

# Codes whose request the client sends again after `retry_after_ms`: the server refused it for
# now (its rate, its queue, its log, its session table), not for what it says.
RETRYABLE = frozenset({"RATE_LIMITED", "OVERLOADED", "LOG_BACKLOG", "LOG_UNAVAILABLE", "TOO_MANY_SESSIONS"})

# The client's own codes (never sent by baton).
CONNECT_FAILED = "CONNECT_FAILED"  # no connection could be opened (refused, timed out, not a WebSocket)
CONNECTION_LOST = "CONNECTION_LOST"  # the connection dropped while a request awaited its answer
CLOSED = "CLOSED"  # the client was closed (or never connected)
TIMEOUT = "TIMEOUT"  # no answer (or no resolution) in time


class BatonError(Exception):
    """An error: `code` is the protocol's (docs/protocol.md, "Error codes"), an HTTP refusal's at
    connect (ORIGIN_REFUSED, UNAUTHORIZED, ...), or the client's own (CONNECT_FAILED,
    CONNECTION_LOST, CLOSED, TIMEOUT). `frame` is the error frame when baton sent one."""

    def __init__(self, code: str, message: str = "", detail: Any = None, retry_after_ms: Optional[int] = None,
                 frame: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.detail = detail
        self.retry_after_ms = retry_after_ms
        self.frame = frame

    @classmethod
    def from_frame(cls, frame: Dict[str, Any]) -> "BatonError":
        """An error frame (or an HTTP error body) as an exception."""
        return cls(str(frame.get("code") or "UNKNOWN_ERROR"), str(frame.get("error") or ""), frame.get("detail"),
                   frame.get("retry_after_ms"), frame)

    def __repr__(self) -> str:
        return f"BatonError({self.code!r}, {self.message!r})"
