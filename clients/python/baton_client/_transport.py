"""Opening the WebSocket with whichever `websockets` is installed.

websockets >= 13 has the asyncio client (`websockets.asyncio.client`, headers as
`additional_headers`, a refusal's body on `InvalidStatus.response`); 14 made it the default and
moved the old one to `websockets.legacy`. Older releases (Debian 12 ships 10.4) have only the
legacy client (`extra_headers`), which does not read a refusal's body: a protocol subclass reads it
here, so that a refused upgrade says baton's code (UNAUTHORIZED, ORIGIN_REFUSED, ...) either way.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from typing import Any, Dict, Optional, Tuple

from .errors import CONNECT_FAILED, BatonError

try:
    import websockets
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, WebSocketException
except ModuleNotFoundError as e:  # pragma: no cover - depends on the interpreter
    raise ModuleNotFoundError(
        f"baton_client needs the `websockets` package, which {sys.executable} does not have: "
        "`pip install websockets` (Debian: apt install python3-websockets, for /usr/bin/python3)") from e

_asyncio_connect: Any
try:  # websockets >= 13 (imported by name: the installed release may not have it)
    _asyncio_connect = importlib.import_module("websockets.asyncio.client").connect
except ImportError:
    _asyncio_connect = None

__all__ = ["ConnectionClosed", "open_connection", "WEBSOCKETS_VERSION"]

WEBSOCKETS_VERSION: str = getattr(websockets, "__version__", "unknown")

# Bytes of a refusal's body read (baton's are one small JSON object).
_MAX_REFUSAL_BODY = 65536


def _refusal(status: int, body: bytes) -> BatonError:
    """A refused upgrade as BatonError: the body's code when it is baton's error body."""
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        parsed = None
    if isinstance(parsed, dict) and parsed.get("code"):
        error = BatonError.from_frame(parsed)
        error.detail = {"status": status, "detail": parsed.get("detail")}
        return error
    return BatonError(CONNECT_FAILED, f"the server answered the upgrade with HTTP {status}", {"status": status})


if _asyncio_connect is None:
    from websockets.exceptions import InvalidStatusCode
    from websockets.legacy.client import WebSocketClientProtocol
    from websockets.legacy.client import connect as _legacy_connect

    class _RefusalReadingProtocol(WebSocketClientProtocol):
        """The legacy client protocol, keeping the body of a refused upgrade."""

        refusal_body = b""

        async def read_http_response(self) -> Tuple[int, Any]:
            status, headers = await super().read_http_response()
            if status != 101:
                try:
                    length = min(int(headers.get("Content-Length", "0")), _MAX_REFUSAL_BODY)
                    if length > 0:
                        self.refusal_body = await asyncio.wait_for(self.reader.readexactly(length), 5)
                except (ValueError, asyncio.IncompleteReadError, asyncio.TimeoutError):
                    pass
            return status, headers

        async def handshake(self, *args: Any, **kwargs: Any) -> None:
            try:
                await super().handshake(*args, **kwargs)
            except InvalidStatusCode as e:
                raise _refusal(e.status_code, self.refusal_body) from None


async def open_connection(url: str, headers: Optional[Dict[str, str]], max_size: Optional[int],
                          open_timeout: float) -> Any:
    """An open WebSocket (send, async iteration, close), or BatonError: the refusal's code, or
    CONNECT_FAILED."""
    common: Dict[str, Any] = {"max_size": max_size, "open_timeout": open_timeout, "ping_interval": 20,
                              "ping_timeout": 20, "close_timeout": 5}
    try:
        if _asyncio_connect is not None:
            try:
                return await _asyncio_connect(url, additional_headers=headers, **common)
            except InvalidHandshake as e:
                response = getattr(e, "response", None)
                if response is not None and getattr(response, "status_code", 101) != 101:
                    raise _refusal(response.status_code, getattr(response, "body", b"") or b"") from None
                raise
        return await _legacy_connect(url, extra_headers=headers,
                                     create_protocol=_RefusalReadingProtocol,  # type: ignore[arg-type]
                                     **common)
    except BatonError:
        raise
    except (OSError, asyncio.TimeoutError, TimeoutError, WebSocketException, EOFError) as e:
        raise BatonError(CONNECT_FAILED, f"cannot connect to {url}: {e or type(e).__name__}") from e
