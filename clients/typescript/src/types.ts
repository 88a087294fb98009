// The frames of baton's agent protocol (docs/protocol.md), as the server sends and reads them.
// Fields the server may add later are allowed by the index signatures of the open objects.

/** One event of a session's history: `{role:"user",content}`, `{role:"tool",tool,output}`, … */
export interface AgentEvent {
  role: string;
  content?: unknown;
  tool?: string;
  ok?: boolean;
  output?: unknown;
  error_code?: string;
  /** Media the model reads with the event (data URLs, or paths under the engine's media roots). */
  images?: string[];
  audio?: string[];
  videos?: string[];
  [key: string]: unknown;
}

/** The tool call the agent intends (`decide.proposal`). */
export interface Proposal {
  tool: string;
  arguments?: Record<string, unknown>;
}

/** An extra SystemOne question asked in the same forward pass (`decide.questions`). */
export type Question =
  | { type: "choice"; instructions?: string; criteria: Record<string, string> }
  | { type: "score"; instructions?: string; criteria: string[] }
  | { type: "noul"; instructions?: string };

export interface ChoiceAnswer {
  type: "choice";
  choice: string;
  confidence: number;
  probabilities: Record<string, number>;
}
export interface ScoreAnswer {
  type: "score";
  score: number;
  confidence: number;
  legend: Record<string, string>;
  probabilities: Record<string, number>;
}
export interface NoulAnswer {
  type: "noul";
  noul: number;
}
export type Answer = ChoiceAnswer | ScoreAnswer | NoulAnswer;
/** The SystemOne answers of every question, by question id (`tool`, `<tool>.<param>`, globals, extras). */
export type Answers = Record<string, Answer>;

export type Action = "execute" | "fallback" | "escalate" | "deny" | "finish";
export type Executor = "agent" | "http" | "command";

export interface Usage {
  input_tokens: number;
  cached_tokens: number;
  state_truncated: boolean;
  events_dropped: number;
  /** The session's oldest media items left out to fit the engine's limits (docs/protocol.md). */
  media_dropped: number;
}

export interface Timings {
  queue: number;
  compile: number;
  engine: number;
  policy: number;
  log: number;
  total: number;
}

/** The answer to a `decide`. */
export interface Decision {
  type: "decision";
  /** The request's frame id, echoed. */
  id: number;
  /** The decision id (`d-…`): what `tool_result` names. */
  decision: string;
  session: string;
  turn: number;
  action: Action;
  tool?: string;
  arguments?: Record<string, unknown>;
  lane: string;
  confidence: number;
  executor?: Executor;
  answers: Answers;
  model: string;
  usage: Usage;
  /** With `action: "escalate"`: the escalation a person resolves (`e-…`). */
  escalation?: string;
  deadline_at?: string;
  /** On an escalation the policy's audit drew. */
  audit?: boolean;
  /** After an engine failure or timeout. */
  error_code?: string;
  /** With `routing.fallback`: the first pass's row in the log. */
  fallback_of?: string;
  timings_ms: Timings;
  [key: string]: unknown;
}

/** A tool baton ran itself (executor `http` or `command`), sent after the decision or resolution. */
export interface ToolResultFrame {
  type: "tool_result";
  decision: string;
  tool: string;
  ok: boolean;
  error_code?: string;
  detail?: string;
  attempts?: number;
  output: unknown;
  /**
   * What baton appended to the session's history; absent for a tool it ran on a resolution (the
   * turn is over: the agent adds the run to its history, as Session.batonRan does).
   */
  event?: AgentEvent;
  [key: string]: unknown;
}

/** How a person (or the deadline) resolved an escalation. */
export interface Resolution {
  id: string;
  escalation: string;
  decision: string;
  session: string;
  turn: number;
  outcome: "execute" | "deny";
  tool?: string;
  arguments?: Record<string, unknown>;
  reason: string;
  reviewer: string;
  by: "reviewer" | "deadline";
  forced: boolean;
  created_at: string;
  created_ms: number;
  executor?: Executor;
  [key: string]: unknown;
}

export interface ResolutionFrame {
  type: "resolution";
  resolution: Resolution;
}

/** The answer to a `resume`, followed by `resolutions` resolution frames. */
export interface ResumedFrame {
  type: "resumed";
  ref: number;
  session: string;
  pending: string[];
  resolutions: number;
}

/** The answer to an agent's `tool_result`, once it is in the log. */
export interface AckFrame {
  type: "ack";
  ref: number;
  decision: string;
}

/** The answer to an `end`: baton no longer holds the session. */
export interface EndedFrame {
  type: "ended";
  ref: number;
  session: string;
}

/** One issue of an INVALID_FRAME error (FastAPI style). */
export interface ErrorIssue {
  loc: (string | number)[];
  msg: string;
  type: string;
  ctx?: Record<string, unknown>;
}

export interface ErrorFrame {
  type: "error";
  /** The refused frame's id; null for frames refused before they were read. */
  ref: number | null;
  error: string;
  code: string;
  detail?: ErrorIssue[] | unknown;
  retry_after_ms?: number;
}

export type ServerFrame = Decision | ToolResultFrame | ResolutionFrame | ResumedFrame | AckFrame | EndedFrame | ErrorFrame;

// Client → server.

export interface DecideFrame {
  type: "decide";
  id?: number;
  session: string;
  turn?: number;
  history?: AgentEvent[];
  append?: AgentEvent[];
  proposal?: Proposal;
  questions?: Record<string, Question>;
}

export interface ToolResultRequest {
  type: "tool_result";
  id?: number;
  decision: string;
  ok: boolean;
  output: unknown;
}

export interface ResumeFrame {
  type: "resume";
  id?: number;
  session: string;
}

export interface AckRequest {
  type: "ack";
  id?: number;
  resolution: string;
}

export interface EndFrame {
  type: "end";
  id?: number;
  session: string;
}

export type ClientFrame = DecideFrame | ToolResultRequest | ResumeFrame | AckRequest | EndFrame;
