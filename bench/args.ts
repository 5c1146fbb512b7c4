import { parseArgs } from 'node:util';

export interface BenchOptions {
  readonly json: boolean;
  readonly smoke: boolean;
  readonly assertTargets: boolean;
  readonly signSeconds: number;
  readonly warmupSeconds: number;
  readonly throughputSeconds: number;
  readonly latencySeconds: number;
  readonly soakSeconds: number;
  readonly connections: number;
  readonly rates: readonly number[];
  readonly logLevel: string;
  /** Also measure throughput at the other log level (info vs warn). */
  readonly compareLogLevels: boolean;
  /** Also measure the floor proxy (bench/floor-proxy.ts) under the same load. */
  readonly measureFloor: boolean;
  readonly cpuProfDir: string | undefined;
}

export const USAGE = `Usage: npm run bench -- [options]

  --json                 last line of output is one JSON object with the headline numbers
  --smoke                a few seconds in all, for CI (no targets asserted)
  --assert               exit 1 if a target of issue 8 is missed
  --soak-seconds N       soak duration (default 60; smoke 2)
  --throughput-seconds N saturation run, in 2 s slices (default 10; smoke 1)
  --latency-seconds N    each fixed-rate run (default 15; smoke 1)
  --sign-seconds N       raw signing loops, shared out before, between and after the slices (default 3; smoke 0.5)
  --connections N        autocannon connections for saturation (default 64)
  --rates A,B            fixed offered rates in req/s (default 200,1000)
  --log-level LEVEL      sidecar log level (default info, the product's default)
  --no-compare           skip the throughput run at the other log level
  --no-floor             skip the floor proxy (node:http + the gateway client + crypto.sign and nothing else)
  --cpu-prof DIR         run the sidecar with --cpu-prof, profiles written to DIR

Environment (for A/B comparisons and profiling):
  BENCH_SIDECAR_ENTRY         another build's main.js instead of dist/src/main.js
  BENCH_SIDECAR_NODE_OPTIONS  NODE_OPTIONS for the sidecar only (e.g. --perf-basic-prof for perf)
  UV_THREADPOOL_SIZE          passed through to the sidecar (libuv's pool runs the signatures)
`;

export function parseBenchArgs(argv: readonly string[]): BenchOptions | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      json: { type: 'boolean', default: false },
      smoke: { type: 'boolean', default: false },
      assert: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
      'soak-seconds': { type: 'string' },
      'throughput-seconds': { type: 'string' },
      'latency-seconds': { type: 'string' },
      'sign-seconds': { type: 'string' },
      connections: { type: 'string' },
      rates: { type: 'string' },
      'log-level': { type: 'string', default: 'info' },
      'no-compare': { type: 'boolean', default: false },
      'no-floor': { type: 'boolean', default: false },
      'cpu-prof': { type: 'string' },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const smoke = values.smoke;
  const num = (raw: string | undefined, full: number, short: number): number => {
    if (raw === undefined) return smoke ? short : full;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive number: ${raw}`);
    return n;
  };
  const rates = (values.rates ?? '200,1000').split(',').map((r) => num(r, 0, 0));
  return {
    json: values.json,
    smoke,
    assertTargets: values.assert,
    signSeconds: num(values['sign-seconds'], 3, 0.5),
    warmupSeconds: smoke ? 0.5 : 3,
    throughputSeconds: num(values['throughput-seconds'], 10, 1),
    latencySeconds: num(values['latency-seconds'], 15, 1),
    soakSeconds: num(values['soak-seconds'], 60, 2),
    connections: num(values.connections, 64, 16),
    rates,
    logLevel: values['log-level'],
    compareLogLevels: !smoke && !values['no-compare'],
    // Kept in --smoke on purpose: CI then runs the floor proxy too, so it cannot rot unnoticed.
    measureFloor: !values['no-floor'],
    cpuProfDir: values['cpu-prof'],
  };
}
