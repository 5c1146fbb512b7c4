// npm run bench: the sidecar's cost per signed request against the RSA signing limit (issue 8).
// Everything runs on loopback, each phase is bounded in time, and every process and temp file is removed.
import type { KeyObject } from 'node:crypto';
import { loadavg } from 'node:os';
import { USAGE, parseBenchArgs, type BenchOptions } from './args.js';
import { SIGNED_ROUTE } from './gateway.js';
import { loadedRun, soakGrowthMb } from './measure.js';
import { openLoop } from './open-loop.js';
import { direct, viaSidecar } from './payload.js';
import { rssMb } from './processes.js';
import { fmt, latencyRows, machine, renderTable, targetsMet, verdicts, type Headline, type LatencyPair, type Row } from './report.js';
import { slicedSaturation, type Saturation } from './saturation.js';
import { createWorkspace, startFloorProxy, startGateway, startSidecar, type RunningProcess } from './stack.js';
import { Teardown } from './teardown.js';

const teardown = new Teardown();

const say = (opts: BenchOptions, text: string): void => {
  // Progress goes to stderr so that with --json the JSON object stays the last line of stdout.
  if (!opts.json || process.stderr.isTTY) process.stderr.write(`${text}\n`);
};

/**
 * Another process under the same sliced saturation as the sidecar (after its own warm-up), then stopped: the
 * sidecar at the other log level, or the floor proxy.
 */
async function saturateAlongside(key: KeyObject, started: Promise<RunningProcess>, opts: BenchOptions): Promise<Saturation> {
  const proc = await teardown.track(started);
  await loadedRun(proc.url, SIGNED_ROUTE, proc.pid, opts.warmupSeconds, opts.connections);
  const saturation = await slicedSaturation(key, { url: proc.url, path: SIGNED_ROUTE, pid: proc.pid, connections: opts.connections }, opts.throughputSeconds, opts.signSeconds);
  await teardown.stop(proc);
  return saturation;
}

async function bench(opts: BenchOptions): Promise<{ headline: Headline; rows: Row[] }> {
  const loadBefore = loadavg()[0] ?? 0;
  const ws = teardown.keepWorkspace(await createWorkspace());
  const gateway = await teardown.track(startGateway());
  // The flags the image's ENTRYPOINT and `npm start` use, so the bench measures the sidecar as it is shipped.
  const shippedFlags = ['--max-semi-space-size=8'];
  const nodeFlags = [...shippedFlags, ...(opts.cpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.cpuProfDir] : [])];
  const sidecar = await teardown.track(startSidecar(ws, { gatewayUrl: gateway.url, logLevel: opts.logLevel, nodeFlags }));
  const sidecarTarget = viaSidecar(sidecar.url);
  await new Promise((r) => setTimeout(r, 500));
  const rssRest = rssMb(sidecar.pid);
  say(opts, 'warm-up');
  await loadedRun(sidecar.url, SIGNED_ROUTE, sidecar.pid, opts.warmupSeconds, opts.connections);
  say(opts, `saturation: ${opts.throughputSeconds} s in slices between signing-limit loops, ${opts.connections} connections`);
  const target = { url: sidecar.url, path: SIGNED_ROUTE, pid: sidecar.pid, connections: opts.connections };
  const saturation = await slicedSaturation(ws.privateKey, target, opts.throughputSeconds, opts.signSeconds);
  const { run: peak, limit } = saturation.median;
  const pairs: LatencyPair[] = [];
  const directTarget = await direct(gateway.url);
  for (const rate of opts.rates) {
    say(opts, `fixed rate ${rate}/s: ${opts.latencySeconds} s direct, then through the sidecar`);
    const direct = await openLoop(directTarget, SIGNED_ROUTE, rate, opts.latencySeconds);
    const viaSidecar = await openLoop(sidecarTarget, SIGNED_ROUTE, rate, opts.latencySeconds);
    pairs.push({ direct, sidecar: viaSidecar });
  }
  say(opts, `soak: ${opts.soakSeconds} s saturated`);
  const soak = await loadedRun(sidecar.url, SIGNED_ROUTE, sidecar.pid, opts.soakSeconds, opts.connections);
  const growth = soakGrowthMb(soak.rssSamples);
  await teardown.stop(sidecar);
  let other: Saturation | undefined;
  const otherLevel = opts.logLevel === 'info' ? 'warn' : 'info';
  if (opts.compareLogLevels) {
    say(opts, `saturation at log level ${otherLevel}`);
    other = await saturateAlongside(ws.privateKey, startSidecar(ws, { gatewayUrl: gateway.url, logLevel: otherLevel, nodeFlags: shippedFlags }), opts);
  }
  let floor: Saturation | undefined;
  if (opts.measureFloor) {
    say(opts, 'saturation of the floor proxy (node:http + the gateway client + crypto.sign, nothing else)');
    floor = await saturateAlongside(ws.privateKey, startFloorProxy(ws, gateway.url, shippedFlags), opts);
  }
  const at200 = pairs.find((p) => p.sidecar.rate === 200);
  const saturated = [...saturation.slices, ...(other?.slices ?? [])].map((slice) => slice.run);
  const floorErrors = (floor?.slices ?? []).reduce((n, slice) => n + slice.run.errors + slice.run.non2xx, 0);
  const phases = [...saturated, soak, ...pairs.flatMap((p) => [p.direct, p.sidecar])];
  const errors = phases.reduce((n, r) => n + r.errors, 0);
  const non2xx = phases.reduce((n, r) => n + r.non2xx, 0);
  const headline: Headline = {
    sign_limit_per_s: Math.round(limit),
    throughput_per_s: Math.round(peak.requestsPerSecond),
    throughput_per_core: Math.round(peak.perCore),
    ratio_to_limit: round(saturation.median.ratio, 3),
    added_p99_ms_at_200: at200 ? round(at200.sidecar.p99 - at200.direct.p99, 3) : Number.NaN,
    rss_mb_load: round(Math.max(...saturated.map((run) => run.rssMaxMb), soak.rssMaxMb), 1),
    rss_growth_mb_soak: round(growth.growthMb, 1),
    errors: errors + non2xx,
  };
  const rows: Row[] = [
    ['machine', machine()],
    ['raw signing limit (1 core, same key)', `${fmt(limit)} sig/s per core (${fmt(1000 / limit, 3)} ms each)`],
    ['  all limit measurements (min / max)', `${fmt(Math.min(...saturation.limits))} / ${fmt(Math.max(...saturation.limits))} sig/s per core`],
    ['machine load before start (1 min avg)', `${fmt(loadBefore, 2)}${loadBefore > 0.5 ? ' (other work running: latencies are noisy)' : ''}`],
    [`sidecar log level`, `${opts.logLevel}${opts.logLevel === 'info' ? ' (default)' : ''}`],
    [`max throughput (${opts.connections} conns)`, `${fmt(peak.requestsPerSecond)} req/s`],
    ['sidecar CPU at max throughput', `${fmt(peak.cores, 2)} cores`],
    ['throughput per sidecar core', `${fmt(peak.perCore)} req/s per core`],
    ['ratio to signing limit', fmt(saturation.median.ratio, 3)],
    [`  ratio in each slice (${saturation.slices.length})`, saturation.slices.map((slice) => fmt(slice.ratio, 3)).join(' ')],
    ...(other
      ? ([[`at log level ${otherLevel}: throughput, per core`, `${fmt(other.median.run.requestsPerSecond)} req/s, ${fmt(other.median.run.perCore)}/core (${fmt(other.median.ratio, 3)})`]] as Row[])
      : []),
    ...(floor
      ? ([[`floor proxy: throughput, per core`, `${fmt(floor.median.run.requestsPerSecond)} req/s, ${fmt(floor.median.run.perCore)}/core (${fmt(floor.median.ratio, 3)})${floorErrors ? `, ${floorErrors} errors` : ''}`]] as Row[])
      : []),
    ...latencyRows(pairs),
    ['RSS at rest / max under load', `${fmt(rssRest, 1)} / ${fmt(headline.rss_mb_load, 1)} MB`],
    [`RSS over ${opts.soakSeconds} s soak (s5-10 -> end)`, `${fmt(growth.startMb, 1)} -> ${fmt(growth.endMb, 1)} MB (${fmt(growth.growthMb, 1)}), ${fmt(soak.requestsPerSecond)} req/s`],
    ['errors / non-2xx (all phases)', `${errors} / ${non2xx}`],
  ];
  return { headline, rows: opts.smoke ? rows : [...rows, ...verdicts(headline)] };
}

function round(n: number, digits: number): number {
  return Number(n.toFixed(digits));
}

async function main(): Promise<number> {
  const opts = parseBenchArgs(process.argv.slice(2));
  if (opts === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  teardown.onSignals();
  try {
    const { headline, rows } = await bench(opts);
    process.stdout.write(`${renderTable(rows)}\n`);
    if (opts.json) process.stdout.write(`${JSON.stringify(headline)}\n`);
    return opts.assertTargets && !opts.smoke && !targetsMet(headline) ? 1 : 0;
  } finally {
    await teardown.cleanup();
  }
}

process.exitCode = await main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  teardown.removeWorkspaceNow();
  return 1;
});
