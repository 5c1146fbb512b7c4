/**
 * Start-up leaves garbage in both of V8's generations (the settings' schema and their parse, the modules' top-level
 * work, the metric series made at zero) and a young generation that its scavenges grew to the image's cap. A sidecar
 * at rest allocates too little for V8 to collect either soon, so it would hold them for as long as it idles: some
 * 4 MB of RSS (docs/performance.md, "What is left at rest"). One memory-reducing full collection once start-up is
 * over gives them back, at the cost of some 30 ms of the main thread, once.
 *
 * It needs node's `gc` function, which only the `--expose-gc` flag gives (the image's ENTRYPOINT and `npm start` set
 * it); without it nothing is collected. Node 20's V8 takes the call for a regular full collection.
 */
export function releaseStartUpGarbage(): void {
  if (globalThis.gc === undefined) return;
  // 'last-resort' is V8's memory-reducing collection: the young generation shrunk back to its first size and the
  // freed pages returned. A 'regular' full collection frees the same objects but keeps their pages resident.
  globalThis.gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}
