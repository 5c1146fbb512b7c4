import { constants, sign, type KeyObject } from 'node:crypto';

/**
 * The physical limit: RSA-2048 PKCS#1 v1.5 SHA-256 signatures per second on one core, with the same key and a
 * signing string of the sidecar's size. Synchronous on purpose: nothing else runs, so this is pure crypto cost.
 */
export function signLimitPerSecond(key: KeyObject, seconds: number): number {
  const input = Buffer.from(`POST.http://127.0.0.1:1/api/v2/transaction/init.1700000000.${'n'.repeat(32)}.${'A'.repeat(200)}`);
  const options = { key, padding: constants.RSA_PKCS1_PADDING };
  for (let i = 0; i < 50; i++) sign('sha256', input, options); // warm-up
  const start = performance.now();
  const until = start + seconds * 1000;
  let count = 0;
  while (performance.now() < until) {
    for (let i = 0; i < 20; i++) sign('sha256', input, options);
    count += 20;
  }
  return count / ((performance.now() - start) / 1000);
}
