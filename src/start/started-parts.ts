// A start that fails half-way (a port taken, a secret file gone) stops what it had started before it rejects: no
// listener, store connection or timer of a sidecar that never ran is left behind its error.

/** What a start has opened so far, each with how to stop it. */
export class StartedParts {
  private readonly stops: Array<() => void | Promise<void>> = [];

  /** `stop` undoes the step just taken; it must also do no harm when that part never got as far as starting. */
  add(stop: () => void | Promise<void>): void {
    this.stops.push(stop);
  }

  /** Runs every stop, the last added first, one after the other; one that fails does not keep the next from running. */
  async stopAll(): Promise<void> {
    for (const stop of this.stops.splice(0).reverse()) {
      try {
        await stop();
      } catch {
        // The start's own error is the one its caller gets; a part that cannot stop cleanly has nothing to add.
      }
    }
  }
}
