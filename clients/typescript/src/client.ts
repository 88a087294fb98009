import type { IncomingMessage } from "node:http";
import WebSocket from "ws";

import { TypedEmitter } from "./emitter.js";
import { BatonError, RETRYABLE_CODES } from "./errors.js";
import { Session, type RequestHooks, type SessionHost } from "./session.js";
import type { EndedFrame, ErrorFrame, Resolution, ServerFrame, ToolResultFrame } from "./types.js";

export interface ReconnectOptions {
  /** The first wait after a drop (default 100 ms); it doubles each attempt. */
  initialDelayMs?: number;
  /** The longest wait (default 5000 ms). Each wait is jittered to between half of it and all of it. */
  maxDelayMs?: number;
  /** Attempts before giving up (default Infinity). */
  maxAttempts?: number;
}

export interface BatonClientOptions {
  /** ws://HOST:PORT/v1/agent */
  url: string;
  /** Sent as `Authorization: Bearer …`; default $BATON_API_KEY; none: no header. */
  apiKey?: string;
  /** Reconnect after a dropped connection (default on: true or options), or false. */
  reconnect?: ReconnectOptions | boolean;
  /** A request without an answer this long after it was made rejects with TIMEOUT (default 60000). */
  requestTimeoutMs?: number;
  /** Frames awaiting an answer at once (default 64); more wait, in order. */
  maxInFlight?: number;
  /** Times a request refused with RATE_LIMITED, OVERLOADED, LOG_BACKLOG, LOG_UNAVAILABLE or TOO_MANY_SESSIONS is sent again (default 5). */
  retries?: number;
}

export interface ClientEvents {
  /** A resolution of one of this client's sessions: each id once per client lifetime. */
  resolution: Resolution;
  /** A tool baton ran itself (executor http or command). */
  tool_result: ToolResultFrame;
  /** The connection dropped; the next attempt starts after delayMs. */
  reconnecting: { attempt: number; delayMs: number; error: BatonError };
  /** Connected again; the resumes of all sessions are sent. */
  reconnected: { sessions: number; attempt: number };
  /** The connection closed (close code and reason as the ws library reports them). */
  disconnected: { code: number; reason: string };
  /** Error frames nothing waits for (ref null), resumes after a reconnect that failed, giving up. */
  error: BatonError;
}

/** One request: a frame (built when it is sent), its answer, its retries. */
interface Job {
  build: () => object;
  resolve: (answer: ServerFrame) => void;
  reject: (err: Error) => void;
  hooks: RequestHooks;
  sends: number;
  /** The id of its latest send. */
  id: number | null;
  done: boolean;
  timer: NodeJS.Timeout | null;
  /** Its place in the order of requests (a retried one goes back there). */
  seq: number;
  /** An ack: this resolution's `ack` goes out right before the frame (a resume), whose answer confirms it. */
  ack?: string;
  ackId?: number;
  ackError?: ErrorFrame;
  /** Sent again after a reconnect instead of failing with CONNECTION_LOST (unconfirmed acks, ends). */
  keep: boolean;
  /** A resume that recover() sends after a reconnect: what waited goes once these are answered. */
  recovery?: boolean;
}

interface ResumeHold {
  job: Job;
  frame: ServerFrame;
  left: number;
  ids: (string | undefined)[];
}

interface Waiter<T> {
  resolve: (value: T) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout | null;
}

const DEFAULTS = { initialDelayMs: 100, maxDelayMs: 5000, maxAttempts: Infinity };
/** Stop sending while the socket holds this much unsent data. */
const HIGH_WATER_BYTES = 1 << 20;
/** Tool results nobody waits for yet, kept for a later batonRan(). */
const TOOL_RESULTS_KEPT = 1024;
// How many times an ack is sent again for a resolution baton sends again after confirming it.
const REACKS = 5;
/** Frames up to 64 MiB (baton's own limit for what it sends is lower). */
const MAX_PAYLOAD = 64 << 20;

/**
 * A client of baton's agent WebSocket API (docs/protocol.md): one connection, many sessions,
 * requests matched to their answers by frame id, reconnects that resume every session.
 */
export class BatonClient extends TypedEmitter<ClientEvents> implements SessionHost {
  readonly url: string;
  private readonly apiKey: string | undefined;
  private readonly reconnectOptions: Required<ReconnectOptions> | null;
  private readonly requestTimeoutMs: number;
  private readonly maxInFlight: number;
  private readonly retries: number;

  private ws: WebSocket | null = null;
  private open = false;
  private closed = false;
  private closing: Promise<void> | null = null;
  /** Set once a connection was made: a later drop reconnects (or fails what waits). */
  private everConnected = false;
  private connecting: Promise<void> | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private reconnectWake: (() => void) | null = null;
  private reconnectLoop: Promise<void> | null = null;
  private pumpTimer: NodeJS.Timeout | null = null;
  /** Nothing is sent before this time (ms since the epoch): baton asked to wait (retry_after_ms). */
  private holdUntil = 0;
  private nextSeq = 0;

  private nextId = 1;
  private readonly queue: Job[] = [];
  private readonly inFlight = new Map<number, Job>();
  private readonly ackIds = new Map<number, Job>();
  private readonly live = new Set<Job>();

  private readonly sessions = new Map<string, Session>();
  /** Sessions whose `end` is under way, by name: a new session of that name waits for it. */
  private readonly ending = new Map<string, Promise<unknown>>();
  private readonly emitted = new Set<string>();
  private resumeHold: ResumeHold | null = null; // a resume whose resolution frames are still coming
  private recovering = false; // recover()'s resumes are not all answered yet
  private recoveries = 0;
  private readonly reacks = new Map<string, number>(); // resolution id → acks sent again
  private readonly toolResultsSeen = new Set<string>(); // decisions whose tool_result was handed over
  private readonly resolutionSession = new Map<string, string>();
  private readonly byEscalation = new Map<string, Resolution>();
  private readonly resolutionWaiters = new Map<string, Set<Waiter<Resolution>>>();
  private readonly toolResults = new Map<string, ToolResultFrame>();
  private readonly toolResultWaiters = new Map<string, Set<Waiter<ToolResultFrame>>>();
  private readonly acking = new Map<string, Promise<void>>();
  private readonly acked = new Set<string>();

  constructor(options: BatonClientOptions) {
    super();
    this.url = options.url;
    this.apiKey = options.apiKey ?? process.env.BATON_API_KEY ?? undefined;
    if (this.apiKey === "") this.apiKey = undefined;
    this.reconnectOptions = options.reconnect === false ? null : { ...DEFAULTS, ...definedOnly(options.reconnect === true ? {} : (options.reconnect ?? {})) };
    this.requestTimeoutMs = options.requestTimeoutMs ?? 60_000;
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 64);
    this.retries = Math.max(0, options.retries ?? 5);
  }

  /** Whether the connection is open now. */
  get connected(): boolean {
    return this.open;
  }

  /**
   * Opens the connection. Rejects with the code of baton's HTTP refusal (ORIGIN_REFUSED,
   * UNAUTHORIZED, …) or CONNECT_FAILED; no reconnect is tried for a first connection.
   */
  async connect(): Promise<void> {
    if (this.closed) throw new BatonError("CLOSED", "the client was closed");
    if (this.open) return;
    if (this.reconnectLoop) return this.reconnectLoop.then(() => this.connect());
    if (!this.connecting) {
      this.connecting = this.openSocket().then(
        () => {
          this.connecting = null;
          this.opened(false);
        },
        (err: unknown) => {
          this.connecting = null;
          throw err;
        },
      );
    }
    return this.connecting;
  }

  /** The session of that name (1–128 of A-Za-z0-9_.:@-): the same object for the same name. */
  session(name: string): Session {
    let s = this.sessions.get(name);
    if (!s) {
      s = new Session(this, name, this.ending.get(name));
      this.sessions.set(name, s);
    }
    return s;
  }

  /**
   * Acknowledges a resolution: it is not sent again. Resolves once baton has it (the ack, then a
   * resume of its session, whose answer comes after any error for the ack). Idempotent; an ack
   * not confirmed when the connection drops is sent again after the reconnect.
   */
  ack(resolutionId: string): Promise<void> {
    if (this.acked.has(resolutionId)) return Promise.resolve();
    const running = this.acking.get(resolutionId);
    if (running) return running;
    // The resume that confirms it: its own session's, else any (an id this client never received).
    const session = this.resolutionSession.get(resolutionId) ?? this.sessions.keys().next().value ?? "baton-client";
    const done = this.enqueue<ServerFrame>(() => ({ type: "resume", session }), {}, { ack: resolutionId, keep: true }).then(
      () => {
        this.acking.delete(resolutionId);
        this.acked.add(resolutionId);
      },
      (err: unknown) => {
        this.acking.delete(resolutionId);
        throw err;
      },
    );
    this.acking.set(resolutionId, done);
    return done;
  }

  /**
   * Sends any client frame (an `id` is set) and resolves with its answer, with the same
   * back-pressure, retries and timeout as the others. For frames that get an answer (not `ack`).
   */
  request<T extends ServerFrame = ServerFrame>(frame: { type: string; [key: string]: unknown }): Promise<T> {
    if (frame.type === "ack") return Promise.reject(new TypeError("an ack gets no answer: use ack()"));
    const copy = { ...frame };
    return this.enqueue<T>(() => copy, {});
  }

  /**
   * Ends every session (when connected; waiting at most requestTimeoutMs), then stops
   * reconnecting, rejects every pending call with CLOSED and closes the connection.
   */
  close(): Promise<void> {
    this.closing ??= this.endSessions().then(() => this.shutDown());
    return this.closing;
  }

  /** baton frees the sessions now rather than after its idle timeout (`server.session_idle_s`). */
  private async endSessions(): Promise<void> {
    if (!this.open) return;
    for (const s of [...this.sessions.values()]) s.end().catch(() => undefined);
    if (this.ending.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(this.ending.values()),
      new Promise((resolve) => (timer = setTimeout(resolve, this.requestTimeoutMs))),
    ]);
    clearTimeout(timer);
  }

  private async shutDown(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectWake?.();
    if (this.pumpTimer) clearTimeout(this.pumpTimer);
    const err = () => new BatonError("CLOSED", "the client was closed");
    for (const job of [...this.live]) this.fail(job, err());
    this.queue.length = 0;
    failWaiters(this.resolutionWaiters, err);
    failWaiters(this.toolResultWaiters, err);
    const ws = this.ws;
    this.open = false;
    if (ws && ws.readyState !== WebSocket.CLOSED) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          ws.terminate();
          resolve();
        }, 2000);
        ws.once("close", () => {
          clearTimeout(timer);
          resolve();
        });
        if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
        else ws.close(1000, "client closed");
      });
    }
  }

  // SessionHost

  /** @internal */
  async sendEnd(name: string): Promise<void> {
    try {
      // Kept across a reconnect like an ack: an end is idempotent.
      await this.enqueue<EndedFrame>(() => ({ type: "end", session: name }), {}, { keep: true });
    } catch (err) {
      if (!(err instanceof BatonError && err.code === "UNKNOWN_SESSION")) throw err;
    }
  }

  /** @internal */
  forget(session: Session, ended: Promise<unknown>): void {
    if (this.sessions.get(session.name) === session) this.sessions.delete(session.name);
    this.ending.set(session.name, ended);
    void ended.then(() => {
      if (this.ending.get(session.name) === ended) this.ending.delete(session.name);
    });
  }

  /** @internal */
  isClosed(): boolean {
    return this.closed;
  }

  /** @internal */
  send<T>(build: () => object, hooks: RequestHooks = {}): Promise<T> {
    return this.enqueue<T>(build, hooks);
  }

  /** @internal */
  waitToolResult(decision: string, timeoutMs: number | undefined): Promise<ToolResultFrame> {
    const ready = this.toolResults.get(decision);
    if (ready) {
      this.toolResults.delete(decision);
      return Promise.resolve(ready);
    }
    if (this.closed) return Promise.reject(new BatonError("CLOSED", "the client was closed"));
    return addWaiter(this.toolResultWaiters, decision, timeoutMs ?? this.requestTimeoutMs, `no tool_result for ${decision}`);
  }

  /** @internal */
  waitResolution(escalation: string, timeoutMs: number | undefined): Promise<Resolution> {
    const ready = this.byEscalation.get(escalation);
    if (ready) return Promise.resolve(ready);
    if (this.closed) return Promise.reject(new BatonError("CLOSED", "the client was closed"));
    return addWaiter(this.resolutionWaiters, escalation, timeoutMs, `no resolution of ${escalation}`);
  }

  // Requests

  private enqueue<T>(build: () => object, hooks: RequestHooks, extra: { ack?: string; keep?: boolean; recovery?: boolean } = {}): Promise<T> {
    if (this.closed) return Promise.reject(new BatonError("CLOSED", "the client was closed"));
    if (this.everConnected && !this.open && !this.reconnectLoop && !this.connecting) {
      return Promise.reject(new BatonError("CONNECTION_LOST", "the connection to baton is closed (reconnect is off or gave up)"));
    }
    return new Promise<T>((resolve, reject) => {
      const job: Job = {
        build,
        resolve: resolve as (answer: ServerFrame) => void,
        reject,
        hooks,
        sends: 0,
        id: null,
        done: false,
        timer: null,
        seq: this.nextSeq++,
        keep: extra.keep ?? false,
      };
      if (extra.ack !== undefined) job.ack = extra.ack;
      if (extra.recovery) job.recovery = true;
      job.timer = setTimeout(() => {
        const sent = job.id !== null && this.inFlight.get(job.id) === job;
        this.fail(job, new BatonError("TIMEOUT", `no answer within ${this.requestTimeoutMs} ms`));
        if (sent) job.hooks.onUncertain?.();
        this.pump();
      }, this.requestTimeoutMs);
      this.live.add(job);
      this.queue.push(job);
      this.pump();
    });
  }

  /** Sends queued frames while fewer than maxInFlight await answers and the socket drains. */
  private pump(): void {
    if (!this.open || !this.ws || this.pumpTimer) return;
    while (this.queue.length > 0 && this.inFlight.size < this.maxInFlight) {
      // After a RATE_LIMITED (or OVERLOADED, …) nothing goes out until retry_after_ms has passed:
      // frames sent meanwhile would be refused too, and baton closes (1008) after
      // server.max_bad_frames refusals in a row. Nor while the socket has a backlog to write.
      const wait = this.holdUntil - Date.now();
      if (wait > 0 || this.ws.bufferedAmount > HIGH_WATER_BYTES) {
        this.pumpTimer = setTimeout(() => {
          this.pumpTimer = null;
          this.pump();
        }, wait > 0 ? wait : 5);
        return;
      }
      // After a reconnect, what waited goes once the sessions' resumes are answered (baton then
      // routes their resolutions here and takes their tools' results on this connection).
      // (A retried resume goes back to its place in the order, behind what waited: it is looked for.)
      const at = this.recovering ? this.queue.findIndex((j) => j.keep || j.recovery) : 0;
      if (at < 0) return;
      const [job] = this.queue.splice(at, 1);
      if (!job.done) this.transmit(job);
    }
  }

  private transmit(job: Job): void {
    const ws = this.ws!;
    let text: string;
    const id = this.nextId++;
    try {
      text = JSON.stringify({ ...job.build(), id });
    } catch (err) {
      this.fail(job, err instanceof Error ? err : new Error(String(err)));
      return;
    }
    job.sends += 1;
    job.id = id;
    if (job.ack !== undefined) {
      job.ackId = this.nextId++;
      delete job.ackError;
      this.ackIds.set(job.ackId, job);
      ws.send(JSON.stringify({ type: "ack", id: job.ackId, resolution: job.ack }));
    }
    this.inFlight.set(id, job);
    // A failed send closes the socket; the close handler fails or keeps what is in flight.
    ws.send(text, () => undefined);
  }

  private answered(job: Job, frame: ServerFrame): void {
    if (job.id !== null) this.inFlight.delete(job.id);
    if (job.ackId !== undefined) this.ackIds.delete(job.ackId);
    const error = job.ackError ?? (frame.type === "error" ? frame : undefined);
    if (!error) {
      this.finish(job);
      job.resolve(frame);
    } else if (RETRYABLE_CODES.has(error.code) && job.sends <= this.retries) {
      job.id = null;
      this.holdUntil = Math.max(this.holdUntil, Date.now() + Math.max(0, error.retry_after_ms ?? 100));
      this.requeue(job);
    } else {
      this.fail(job, BatonError.fromFrame(error));
    }
    this.pump();
  }

  private releaseResume(hold: ResumeHold): void {
    const { job, frame, ids } = hold;
    if (job.ack !== undefined && !job.ackError && ids.includes(job.ack) && job.sends <= this.retries) {
      // baton could not write the ack's row and sent the resolution again with this answer: the
      // ack and its resume go again.
      if (job.id !== null) this.inFlight.delete(job.id);
      if (job.ackId !== undefined) this.ackIds.delete(job.ackId);
      job.id = null;
      this.requeue(job);
      this.pump();
      return;
    }
    this.answered(job, frame);
  }

  /** Back into the queue at its place in the order of requests. */
  private requeue(job: Job): void {
    const at = this.queue.findIndex((j) => j.seq > job.seq);
    if (at < 0) this.queue.push(job);
    else this.queue.splice(at, 0, job);
  }

  private finish(job: Job): void {
    job.done = true;
    this.live.delete(job);
    if (job.timer) clearTimeout(job.timer);
    if (job.id !== null && this.inFlight.get(job.id) === job) this.inFlight.delete(job.id);
    if (job.ackId !== undefined) this.ackIds.delete(job.ackId);
  }

  private fail(job: Job, err: Error): void {
    if (job.done) return;
    this.finish(job);
    job.reject(err);
  }

  // Frames from baton

  private onMessage(data: WebSocket.RawData): void {
    let frame: ServerFrame;
    try {
      frame = JSON.parse(data.toString()) as ServerFrame;
    } catch {
      this.emit("error", new BatonError("INVALID_SERVER_FRAME", "baton sent a frame that is not JSON"));
      return;
    }
    switch (frame.type) {
      case "decision": {
        const job = this.inFlight.get(frame.id);
        if (job) this.answered(job, frame);
        return;
      }
      case "resumed":
      case "ack":
      case "ended": {
        const job = frame.ref === null ? undefined : this.inFlight.get(frame.ref);
        if (!job) return;
        // A resume answered with n resolutions completes once those n frames, right behind it,
        // have been handled: its caller sees them.
        if (frame.type === "resumed" && frame.resolutions > 0) {
          this.resumeHold = { job, frame, left: frame.resolutions, ids: [] };
          return;
        }
        this.answered(job, frame);
        return;
      }
      case "error": {
        if (frame.ref !== null && frame.ref !== undefined) {
          const acked = this.ackIds.get(frame.ref);
          if (acked) {
            // An error for an ack: it comes before the answer to the resume that follows it.
            this.ackIds.delete(frame.ref);
            acked.ackError = frame;
            return;
          }
          const job = this.inFlight.get(frame.ref);
          if (job) {
            this.answered(job, frame);
            return;
          }
        }
        this.emit("error", BatonError.fromFrame(frame));
        return;
      }
      case "tool_result":
        this.onToolResult(frame);
        return;
      case "resolution": {
        this.onResolution(frame.resolution);
        const hold = this.resumeHold;
        if (hold) {
          hold.ids.push(frame.resolution?.id);
          if (--hold.left === 0) {
            this.resumeHold = null;
            this.releaseResume(hold);
          }
        }
        return;
      }
    }
  }

  private onToolResult(frame: ToolResultFrame): void {
    // A resolution's run comes again with it on every resume until it is acknowledged: kept for
    // a batonRan that asks again, emitted once.
    const again = this.toolResultsSeen.has(frame.decision);
    this.toolResultsSeen.add(frame.decision);
    if (this.toolResultsSeen.size > TOOL_RESULTS_KEPT * 16) this.toolResultsSeen.delete(this.toolResultsSeen.values().next().value!);
    const waiters = this.toolResultWaiters.get(frame.decision);
    if (waiters && waiters.size > 0) {
      this.toolResultWaiters.delete(frame.decision);
      for (const w of waiters) settleWaiter(w, frame, null);
    } else {
      this.toolResults.set(frame.decision, frame);
      if (this.toolResults.size > TOOL_RESULTS_KEPT) this.toolResults.delete(this.toolResults.keys().next().value!);
    }
    if (!again) this.emit("tool_result", frame);
  }

  private onResolution(r: Resolution | undefined): void {
    if (!r || typeof r.id !== "string") return;
    if (this.emitted.has(r.id)) {
      // Delivery is at least once (a resume sends again what is not acknowledged): once here. One
      // that comes again after its ack was confirmed is one whose delivery row baton failed to
      // write (it sends it again with the confirming answer): acknowledge it again, a few times.
      const tries = this.reacks.get(r.id) ?? 0;
      if (this.acked.has(r.id) && tries < REACKS) {
        this.reacks.set(r.id, tries + 1);
        this.acked.delete(r.id);
        this.ack(r.id).catch((err: unknown) => this.emit("error", err instanceof BatonError ? err : new BatonError("CONNECTION_LOST", String(err))));
      }
      return;
    }
    this.emitted.add(r.id);
    // With API keys baton names the session KEY/NAME; this client knows it by NAME.
    this.resolutionSession.set(r.id, r.session.split("/").pop()!);
    this.byEscalation.set(r.escalation, r);
    const waiters = this.resolutionWaiters.get(r.escalation);
    if (waiters) {
      this.resolutionWaiters.delete(r.escalation);
      for (const w of waiters) settleWaiter(w, r, null);
    }
    this.emit("resolution", r);
  }

  // The connection

  private openSocket(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const headers: Record<string, string> = {};
      if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
      let ws: WebSocket;
      try {
        ws = new WebSocket(this.url, { headers, maxPayload: MAX_PAYLOAD, handshakeTimeout: this.requestTimeoutMs });
      } catch (err) {
        reject(new BatonError("CONNECT_FAILED", err instanceof Error ? err.message : String(err)));
        return;
      }
      let settled = false;
      const refuse = (err: BatonError) => {
        if (settled) return;
        settled = true;
        reject(err);
      };
      ws.on("unexpected-response", (req, res: IncomingMessage) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          if (body.length < 65536) body += chunk;
        });
        res.on("end", () => {
          refuse(httpRefusal(res.statusCode ?? 0, body));
          req.destroy();
        });
        res.on("error", () => refuse(new BatonError("CONNECT_FAILED", `HTTP ${res.statusCode} during the upgrade`)));
      });
      ws.on("error", (err) => {
        if (!settled) refuse(new BatonError("CONNECT_FAILED", err.message));
        // After the upgrade the "close" that follows says it all.
      });
      ws.on("open", () => {
        if (settled) {
          ws.terminate();
          return;
        }
        settled = true;
        if (this.closed) {
          ws.terminate();
          reject(new BatonError("CLOSED", "the client was closed"));
          return;
        }
        this.ws = ws;
        ws.on("message", (data, isBinary) => {
          if (!isBinary) this.onMessage(data);
        });
        ws.on("close", (code, reason) => this.onClose(ws, code, reason.toString()));
        resolve();
      });
    });
  }

  private opened(reconnected: boolean): void {
    this.open = true;
    const first = !this.everConnected;
    this.everConnected = true;
    if (!first || reconnected) this.recover();
    this.pump();
  }

  /**
   * After a reconnect: unconfirmed acks first, then a resume of every session (its resolutions
   * come to this connection, those not acknowledged again), then what was queued.
   */
  private recover(): void {
    const acks = this.queue.filter((j) => j.keep);
    const rest = this.queue.filter((j) => !j.keep);
    this.queue.length = 0;
    this.queue.push(...acks);
    const resumes: Promise<unknown>[] = [];
    for (const s of this.sessions.values()) {
      s.markFresh();
      // Queued directly (not through enqueue) so that it goes before the requests that waited.
      resumes.push(
        this.enqueue(() => ({ type: "resume", session: s.name }), {}, { recovery: true }).catch((err: unknown) => {
          if (err instanceof BatonError && (err.code === "CONNECTION_LOST" || err.code === "CLOSED")) return;
          this.emit("error", err instanceof BatonError ? err : new BatonError("CONNECTION_LOST", String(err)));
        }),
      );
    }
    // enqueue() appended the resumes after the acks; what waited goes last, once they are answered.
    this.queue.push(...rest);
    const generation = ++this.recoveries;
    this.recovering = true;
    void Promise.allSettled(resumes).then(() => {
      if (generation !== this.recoveries) return; // another reconnect since: its own resumes gate
      this.recovering = false;
      this.pump();
    });
  }

  private onClose(ws: WebSocket, code: number, reason: string): void {
    if (this.ws !== ws) return;
    this.ws = null;
    this.resumeHold = null; // its job is still in flight: handled below
    this.open = false;
    if (this.pumpTimer) {
      clearTimeout(this.pumpTimer);
      this.pumpTimer = null;
    }
    this.emit("disconnected", { code, reason });
    if (this.closed) return;
    // What was in flight: acks go again after the reconnect; the rest may or may not have been done.
    const inFlight = [...new Set(this.inFlight.values())].sort((a, b) => (a.id ?? 0) - (b.id ?? 0));
    this.inFlight.clear();
    this.ackIds.clear();
    const kept: Job[] = [];
    for (const job of inFlight) {
      if (job.keep) {
        job.id = null;
        kept.push(job);
      } else {
        this.fail(job, new BatonError("CONNECTION_LOST", `the connection closed (${code}) before the answer came`));
        job.hooks.onUncertain?.();
      }
    }
    for (const job of kept) this.requeue(job);
    for (const s of this.sessions.values()) s.markFresh();
    // baton sends a tool_result once, to the connection of the decision: it will not come now.
    failWaiters(this.toolResultWaiters, () => new BatonError("CONNECTION_LOST", "the connection closed before the tool_result came"));
    const lost = new BatonError("CONNECTION_LOST", `the connection closed (${code}${reason ? ` ${reason}` : ""})`);
    if (this.reconnectOptions) this.reconnectLoop = this.reconnect(lost);
    else this.failQueued(lost);
  }

  private async reconnect(cause: BatonError): Promise<void> {
    const { initialDelayMs, maxDelayMs, maxAttempts } = this.reconnectOptions!;
    let error = cause;
    for (let attempt = 1; attempt <= maxAttempts && !this.closed; attempt++) {
      const cap = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(attempt - 1, 30));
      const delayMs = Math.round(cap / 2 + Math.random() * (cap / 2));
      this.emit("reconnecting", { attempt, delayMs, error });
      await new Promise<void>((wake) => {
        this.reconnectWake = wake;
        this.reconnectTimer = setTimeout(wake, delayMs);
      });
      this.reconnectTimer = null;
      this.reconnectWake = null;
      if (this.closed) break;
      try {
        await this.openSocket();
      } catch (err) {
        error = err instanceof BatonError ? err : new BatonError("CONNECT_FAILED", String(err));
        continue;
      }
      this.reconnectLoop = null;
      this.opened(true);
      this.emit("reconnected", { sessions: this.sessions.size, attempt });
      return;
    }
    this.reconnectLoop = null;
    if (this.closed) return;
    const gaveUp = new BatonError("CONNECTION_LOST", `gave up reconnecting after ${maxAttempts} attempts: ${error.message}`);
    this.failQueued(gaveUp);
    this.emit("error", gaveUp);
  }

  private failQueued(err: BatonError): void {
    for (const job of [...this.live]) if (job.id === null) this.fail(job, err);
    this.queue.length = 0;
    // No connection will come: nobody waits for a resolution or a tool's result forever.
    failWaiters(this.resolutionWaiters, () => err);
    failWaiters(this.toolResultWaiters, () => err);
  }
}

function httpRefusal(status: number, body: string): BatonError {
  try {
    const parsed = JSON.parse(body) as { code?: unknown; error?: unknown; detail?: unknown };
    if (typeof parsed.code === "string") {
      return new BatonError(parsed.code, typeof parsed.error === "string" ? parsed.error : `HTTP ${status}`, {
        detail: parsed.detail,
        frame: parsed,
      });
    }
  } catch {
    // Not baton's error body (a proxy's page): the status says what there is to say.
  }
  return new BatonError("CONNECT_FAILED", `HTTP ${status} instead of the WebSocket upgrade`);
}

function addWaiter<T>(map: Map<string, Set<Waiter<T>>>, key: string, timeoutMs: number | undefined, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const waiter: Waiter<T> = { resolve, reject, timer: null };
    let set = map.get(key);
    if (!set) map.set(key, (set = new Set()));
    set.add(waiter);
    if (timeoutMs !== undefined && Number.isFinite(timeoutMs)) {
      waiter.timer = setTimeout(() => {
        const current = map.get(key);
        current?.delete(waiter);
        if (current && current.size === 0) map.delete(key);
        reject(new BatonError("TIMEOUT", `${what} within ${timeoutMs} ms`));
      }, timeoutMs);
    }
  });
}

/** Rejects every waiter of `map` with an error `err` makes, and forgets them. */
function failWaiters<T>(map: Map<string, Set<Waiter<T>>>, err: () => Error): void {
  for (const waiters of map.values()) for (const w of waiters) settleWaiter(w, null, err());
  map.clear();
}

function settleWaiter<T>(w: Waiter<T>, value: T | null, err: Error | null): void {
  if (w.timer) clearTimeout(w.timer);
  if (err) w.reject(err);
  else w.resolve(value as T);
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
