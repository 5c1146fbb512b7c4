import { constants, sign, type KeyObject } from 'node:crypto';

export interface SignLimit {
  /** Signatures per CPU-second of the signing thread: the per-core limit, immune to other load on the machine. */
  readonly perCpuSecond: number;
}

/**
 * The physical limit: RSA-2048 PKCS#1 v1.5 SHA-256 signatures per second on one core, with the same key and a
 * signing string of the sidecar's size. Synchronous on purpose: nothing else runs, so this is pure crypto cost.
 * It is divided by CPU time, like the sidecar's throughput per core, so the ratio compares like with like even
 * when something else shares the machine.
 */
export function signLimit(key: KeyObject, seconds: number): SignLimit {
  const input = Buffer.from(`POST.http://127.0.0.1:1/api/v2/transaction/init.1700000000.${'n'.repeat(32)}.${'A'.repeat(200)}`);
  const options = { key, padding: constants.RSA_PKCS1_PADDING };
  for (let i = 0; i < 50; i++) sign('sha256', input, options); // warm-up
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const until = start + seconds * 1000;
  let count = 0;
  while (performance.now() < until) {
    for (let i = 0; i < 20; i++) sign('sha256', input, options);
    count += 20;
  }
  const cpu = process.cpuUsage(cpu0);
  return { perCpuSecond: count / ((cpu.user + cpu.system) / 1e6) };
}
