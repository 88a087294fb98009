// baton-client: a client for baton's agent WebSocket API (docs/protocol.md).
export { BatonClient } from "./client.js";
export type { BatonClientOptions, ClientEvents, ReconnectOptions } from "./client.js";
export { BatonError, RETRYABLE_CODES } from "./errors.js";
export { Session } from "./session.js";
export type { DecideOptions, ResumeResult, ToolOutcome } from "./session.js";
export type * from "./types.js";
