"""The frames' shapes (docs/protocol.md), as TypedDicts: what the client returns is the JSON
baton sent, so every key the server adds is there too."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

# An event of a session's history: {"role": "user", "content": ...}, {"role": "tool", "tool": ...,
# "ok": ..., "output": ...}, or any other JSON object the agent keeps.
AgentEvent = Dict[str, Any]

# An extra SystemOne question asked in the same forward pass ({"type": "noul", "instructions": ...}).
Question = Dict[str, Any]


class Proposal(TypedDict, total=False):
    tool: str
    arguments: Dict[str, Any]


class Decision(TypedDict, total=False):
    type: str  # "decision"
    id: Any
    decision: str  # d-...
    session: str
    turn: int
    action: str  # execute | fallback | escalate | deny | finish
    tool: Optional[str]
    arguments: Dict[str, Any]
    lane: str
    confidence: float
    executor: str  # agent | http | command
    answers: Dict[str, Any]
    model: str
    usage: Dict[str, Any]
    escalation: str  # e-..., with action escalate
    deadline_at: str
    timings_ms: Dict[str, float]
    error_code: str
    fallback_of: str
    audit: bool


class Resolution(TypedDict, total=False):
    id: str  # v-...
    escalation: str
    decision: str
    session: str
    turn: int
    outcome: str  # execute | deny
    tool: str
    arguments: Dict[str, Any]
    reason: str
    reviewer: str
    by: str  # reviewer | deadline
    forced: bool
    created_at: str
    created_ms: int
    executor: str


class ToolResultFrame(TypedDict, total=False):
    type: str  # "tool_result"
    decision: str
    tool: str
    ok: bool
    output: Any
    error_code: str
    detail: str
    attempts: int
    event: AgentEvent  # what baton appended to the session's history (absent for a resolution's run)


class Resumed(TypedDict):
    pending: List[str]  # the session's pending escalations
    resolutions: int  # resolutions baton sent again (not acknowledged yet)
