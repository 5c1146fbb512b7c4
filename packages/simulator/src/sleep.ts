// One cancellable wait for everything that pauses on a timer (delay faults, postback backoff). A plain
// `setTimeout` promise would keep the process alive after close() and resume work against a stopped simulator.

/** Resolves true after `ms`, or false as soon as `signal` aborts (the timer is cleared, so nothing lingers). */
export function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve(false);
      return;
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
