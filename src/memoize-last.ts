/**
 * `fn` with a one-entry cache: the last argument and its result. For values on the request path that repeat from
 * one request to the next (the gateway's Date and Keep-Alive headers), where a Map would only grow and a
 * recomputation costs more than one string comparison.
 */
export function memoizeLast<T>(fn: (value: string) => T): (value: string) => T {
  let lastValue: string | undefined;
  let lastResult: T;
  return (value: string): T => {
    if (value !== lastValue) {
      lastResult = fn(value);
      lastValue = value;
    }
    return lastResult;
  };
}
