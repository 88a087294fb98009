"""baton_client: an asyncio client for baton's agent WebSocket API (docs/protocol.md).

    from baton_client import BatonClient, BatonError

    async with BatonClient("ws://127.0.0.1:8470/v1/agent") as baton:
        session = baton.session("ticket-1")
        session.add({"role": "user", "content": "I was charged twice for order 1182"})
        decision = await session.decide()
"""

from .client import BatonClient, Reconnect
from .errors import RETRYABLE, BatonError
from .session import Session
from .frames import AgentEvent, Decision, Proposal, Question, Resolution, Resumed, ToolResultFrame

__version__ = "0.1.0"

__all__ = ["BatonClient", "BatonError", "Reconnect", "Session", "RETRYABLE", "AgentEvent", "Decision", "Proposal",
           "Question", "Resolution", "Resumed", "ToolResultFrame", "__version__"]
