// A small typed event emitter. Unlike node's EventEmitter, an "error" nobody listens to is
// dropped rather than thrown: an error frame nothing waits for must not crash the agent.

type Listener<A> = (arg: A) => void;

export class TypedEmitter<Events extends { [K in keyof Events]: unknown }> {
  private readonly listeners = new Map<keyof Events, Set<Listener<never>>>();

  on<K extends keyof Events>(event: K, listener: Listener<Events[K]>): this {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as Listener<never>);
    return this;
  }

  once<K extends keyof Events>(event: K, listener: Listener<Events[K]>): this {
    const wrapped: Listener<Events[K]> = (arg) => {
      this.off(event, wrapped);
      listener(arg);
    };
    return this.on(event, wrapped);
  }

  off<K extends keyof Events>(event: K, listener: Listener<Events[K]>): this {
    this.listeners.get(event)?.delete(listener as Listener<never>);
    return this;
  }

  protected emit<K extends keyof Events>(event: K, arg: Events[K]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    for (const listener of [...set]) {
      try {
        (listener as Listener<Events[K]>)(arg);
      } catch (err) {
        // A listener's bug surfaces as an uncaught exception, outside the client's own state changes.
        process.nextTick(() => {
          throw err;
        });
      }
    }
  }
}
