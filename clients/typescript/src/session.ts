import { BatonError } from "./errors.js";
import type {
  AckFrame,
  AgentEvent,
  Decision,
  DecideFrame,
  Proposal,
  Question,
  Resolution,
  ResumedFrame,
  ToolResultFrame,
} from "./types.js";

/** What a Session needs of its client (BatonClient implements it). */
export interface SessionHost {
  /** Sends a frame built when it goes out (after back-pressure), resolves with its answer. */
  send<T>(build: () => object, hooks?: RequestHooks): Promise<T>;
  waitToolResult(decision: string, timeoutMs: number | undefined): Promise<ToolResultFrame>;
  waitResolution(escalation: string, timeoutMs: number | undefined): Promise<Resolution>;
  /** Sends `end` for the session; resolves on `ended`, or on UNKNOWN_SESSION (nothing left to end). */
  sendEnd(name: string): Promise<void>;
  /** Drops an ending session: a new one of its name sends nothing before `ended` has settled. */
  forget(session: Session, ended: Promise<unknown>): void;
  /** close() was called. */
  isClosed(): boolean;
}

export interface RequestHooks {
  /** The frame went out but its answer never came (CONNECTION_LOST, TIMEOUT): its effect is unknown. */
  onUncertain?: () => void;
}

export interface DecideOptions {
  /** Events to add before deciding (as add() does). */
  events?: AgentEvent[];
  proposal?: Proposal;
  questions?: Record<string, Question>;
}

export interface ToolOutcome {
  ok: boolean;
  output: unknown;
}

export interface ResumeResult {
  /** The session's escalations still waiting for a person. */
  pending: string[];
  /** How many resolution frames follow (not acknowledged yet); they go to the "resolution" event. */
  resolutions: number;
}

/**
 * One agent session over the client's connection. It keeps the history as baton has it and sends
 * only what is new each turn (`append`), or everything (`history`) when baton may not have it.
 */
export class Session {
  readonly name: string;
  private readonly host: SessionHost;
  private readonly events: AgentEvent[] = [];
  /** events[0, sent) are in baton's copy of the session. */
  private sent = 0;
  /** baton may not have this session (first decide, reconnect, lost answer): send `history`. */
  private fresh = true;
  /** Decides of one session go one after another (baton refuses a second with SESSION_BUSY). */
  private chain: Promise<unknown>;
  private ending: Promise<void> | null = null;

  /** @internal created by BatonClient.session(); `after`: the end of an earlier session of this name */
  constructor(host: SessionHost, name: string, after: Promise<unknown> = Promise.resolve()) {
    this.host = host;
    this.name = name;
    this.chain = after;
  }

  /** Everything this session holds: what baton has, then what the next decide sends. */
  get history(): readonly AgentEvent[] {
    return this.events;
  }

  /** Queues an event for the next decide. */
  add(event: AgentEvent): void {
    this.events.push(event);
  }

  /**
   * Decides the next turn. Sends the full `history` the first time (and after a reconnect or a
   * lost answer), else `append` with the events added since. A second decide while one is under
   * way waits for it.
   */
  decide(options: DecideOptions = {}): Promise<Decision> {
    if (this.ending && !this.host.isClosed()) {
      return Promise.reject(new TypeError(`session ${this.name} was ended: baton.session(name) starts it again`));
    }
    const run = this.chain.then(() => this.decideNow(options));
    this.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * Reports how an agent-run tool went (executor `agent`): a `tool_result` for the decision (or
   * the resolution's decision), resolved with baton's ack once it is in the log. Its event
   * `{role:"tool",tool,ok,output}` joins the history and goes with the next decide.
   */
  async toolResult(of: Decision | Resolution, outcome: ToolOutcome): Promise<AckFrame> {
    const decision = of.decision;
    const ack = await this.host.send<AckFrame>(() => ({
      type: "tool_result",
      decision,
      ok: outcome.ok,
      output: outcome.output ?? null,
    }));
    const event: AgentEvent = { role: "tool", ok: outcome.ok, output: outcome.output ?? null };
    if (of.tool !== undefined) event.tool = of.tool;
    this.add(event);
    return ack;
  }

  /**
   * Waits for the `tool_result` baton sends after running a tool itself (executor `http` or
   * `command`), for a decision or a resolution. A decision's run is already in baton's history
   * (the frame's `event`): it joins this one without being sent again. A resolution's run is not
   * (the turn is over): its event joins this history and goes with the next decide.
   */
  async batonRan(of: Decision | Resolution, options: { timeoutMs?: number } = {}): Promise<ToolResultFrame> {
    const runs = "action" in of ? of.action === "execute" : of.outcome === "execute";
    if (!runs || (of.executor !== "http" && of.executor !== "command")) {
      throw new TypeError(`baton runs no tool for ${of.decision} (executor ${String(of.executor)}, ${"action" in of ? `action ${of.action}` : `outcome ${of.outcome}`})`);
    }
    const frame = await this.host.waitToolResult(of.decision, options.timeoutMs);
    if (frame.event) {
      // baton appended it after what it had: before the events this client has not sent yet.
      this.events.splice(this.sent, 0, frame.event);
      this.sent += 1;
    } else {
      // A resolution's run: the turn is over and baton's history does not have it; the next
      // decide sends it.
      const event: AgentEvent = { role: "tool", tool: frame.tool, ok: frame.ok, output: frame.output };
      if (frame.error_code) event.error_code = frame.error_code;
      this.events.push(event);
    }
    return frame;
  }

  /** The resolution of one of this session's escalations: already received, or when it comes. */
  resolution(escalation: string, options: { timeoutMs?: number } = {}): Promise<Resolution> {
    return this.host.waitResolution(escalation, options.timeoutMs);
  }

  /**
   * Routes the session's resolutions to this connection and has baton send again those not
   * acknowledged (they come as "resolution" events, each id once).
   */
  async resume(): Promise<ResumeResult> {
    const answer = await this.host.send<ResumedFrame>(() => ({ type: "resume", session: this.name }));
    return { pending: answer.pending, resolutions: answer.resolutions };
  }

  /**
   * Ends the session: baton forgets its history (docs/protocol.md, `end`). A decide under way is
   * answered first. Resolves on baton's `ended`, or on UNKNOWN_SESSION (baton restarted, or the
   * session never decided: nothing is left to end). The client drops this object at once: a later
   * `baton.session(name)` is a new session whose first decide sends the full history, and a decide
   * on this one is a TypeError. Idempotent: a second call returns the first one's promise.
   */
  end(): Promise<void> {
    if (!this.ending) {
      this.ending = this.chain.then(() => this.host.sendEnd(this.name));
      this.chain = this.ending.catch(() => undefined);
      this.host.forget(this, this.chain);
    }
    return this.ending;
  }

  /** `await using session = baton.session(name)` ends it when the scope exits. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.end();
  }

  /** @internal after a reconnect baton may have lost the session: the next decide sends it all. */
  markFresh(): void {
    this.fresh = true;
  }

  private async decideNow(options: DecideOptions): Promise<Decision> {
    if (options.events) this.events.push(...options.events);
    let resentFull = false;
    for (;;) {
      let upTo = 0;
      let full = false;
      const build = (): DecideFrame => {
        // Built when it goes out, so that a reconnect while it waited makes it a full history.
        upTo = this.events.length;
        full = this.fresh;
        const frame: DecideFrame = { type: "decide", session: this.name };
        if (full) frame.history = this.events.slice(0, upTo);
        else frame.append = this.events.slice(this.sent, upTo);
        if (options.proposal !== undefined) frame.proposal = options.proposal;
        if (options.questions !== undefined) frame.questions = options.questions;
        return frame;
      };
      try {
        const decision = await this.host.send<Decision>(build, { onUncertain: () => this.markFresh() });
        this.sent = upTo;
        this.fresh = false;
        return decision;
      } catch (err) {
        // baton restarted without this client noticing: send it all, once.
        if (err instanceof BatonError && err.code === "UNKNOWN_SESSION" && !full && !resentFull) {
          resentFull = true;
          this.fresh = true;
          continue;
        }
        throw err;
      }
    }
  }
}
