import type { ErrorFrame } from "./types.js";

/**
 * An error frame of baton (its protocol `code`: INVALID_FRAME, TURN_OUT_OF_ORDER, …), a refused
 * upgrade (its HTTP body's code: ORIGIN_REFUSED, …), or one of the client's own failures:
 * CONNECT_FAILED, CONNECTION_LOST, CLOSED, TIMEOUT.
 */
export class BatonError extends Error {
  override name = "BatonError";
  readonly code: string;
  readonly detail?: unknown;
  readonly retryAfterMs?: number;
  /** The error frame (or HTTP error body) as baton sent it. */
  readonly frame?: object;

  constructor(code: string, message: string, extra: { detail?: unknown; retryAfterMs?: number; frame?: object } = {}) {
    super(`${code}: ${message}`);
    this.code = code;
    if (extra.detail !== undefined) this.detail = extra.detail;
    if (extra.retryAfterMs !== undefined) this.retryAfterMs = extra.retryAfterMs;
    if (extra.frame !== undefined) this.frame = extra.frame;
  }

  static fromFrame(frame: ErrorFrame): BatonError {
    return new BatonError(frame.code, frame.error, {
      detail: frame.detail,
      retryAfterMs: frame.retry_after_ms,
      frame,
    });
  }
}

/** The codes after which the client sends the same request again, after `retry_after_ms`. */
export const RETRYABLE_CODES: ReadonlySet<string> = new Set(["RATE_LIMITED", "OVERLOADED", "LOG_BACKLOG", "LOG_UNAVAILABLE", "TOO_MANY_SESSIONS"]);
