// npm run chaos -- [--duration SECONDS] [--seed N] [--out DIR]   a run: history, check, summary and report in DIR
//                  [--network namespaces|loopback]               each part in its own network namespace (the default
//                                                                when root with ip and nft: links the nemesis cuts),
//                                                                or all on 127.0.0.1
// npm run chaos -- --check FILE [--out DIR]                      the checker alone on a history (exit 1 on a violation);
//                                                                with --out, its summary and report there too
import { setMaxListeners } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { namespacesUnavailable } from '../test/support/netns.js';
import { campaign } from './campaign.js';
import { check, type CheckResult } from './checker.js';
import { readHistory, toJsonl, type HistoryEvent } from './history.js';
import type { PlanKind } from './nemesis.js';
import { Recorder } from './recorder.js';
import { summarize, writeReport } from './report.js';
import { startWorld, type NetworkMode, type World } from './world.js';

const CALLERS = 16;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '60' },
      seed: { type: 'string' },
      out: { type: 'string' },
      check: { type: 'string' },
      // A fault kind that must occur (repeatable): it takes the place of a draw from a third of the run on.
      fault: { type: 'string', multiple: true },
      network: { type: 'string' },
    },
  });
  if (values.check !== undefined) {
    const history = readHistory(values.check);
    const result = check(history);
    // With --out, the summary and the report of that history too (a run's own, or one to look at again).
    if (values.out !== undefined) {
      mkdirSync(values.out, { recursive: true });
      await writeReport(values.out, history, summarize(history, result));
    }
    return report(result);
  }
  const out = values.out ?? 'chaos-out';
  const duration = Number(values.duration);
  const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
  if (!Number.isInteger(seed) || !(duration >= 10)) throw new Error('--seed must be an integer, --duration >= 10 s');
  console.log(`chaos: seed ${seed}, ${duration} s, out ${out}`);
  const network = networkMode(values.network);
  mkdirSync(out, { recursive: true });
  // The simulator's shutdown signal has a listener per postback waiting for its retry: hundreds while the
  // application is down, which is no leak.
  setMaxListeners(10_000);
  const history = await run(seed, duration, out, (values.fault ?? []) as PlanKind[], network);
  writeFileSync(join(out, 'history.jsonl'), toJsonl(history));
  const result = check(history);
  const summary = summarize(history, result);
  await writeReport(out, history, summary);
  if (result.faults['redis-restart-snapshot'] !== undefined) {
    console.log(
      `chaos: ${summary.rollbacks} of ${result.faults['redis-restart-snapshot']} restarts from a snapshot rolled ` +
        'the data back (a failover first keeps it)',
    );
  }
  console.log(`chaos: history, summary.json and report.html in ${out}`);
  return report(result);
}

/** Stopped on SIGINT or SIGTERM: nothing the run started outlives it. */
let running: World | undefined;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`chaos: ${signal}, stopping everything the run started`);
    void (running?.close() ?? Promise.resolve()).finally(() => process.exit(2));
  });
}

async function run(
  seed: number,
  durationS: number,
  out: string,
  forced: readonly PlanKind[],
  network: NetworkMode,
): Promise<HistoryEvent[]> {
  const recorder = new Recorder();
  const world = await startWorld(
    out,
    (replica, code, signal) => recorder.record({ type: 'crash', replica, code, signal }),
    { network },
  );
  running = world;
  recorder.record({
    type: 'run',
    seed,
    duration_s: durationS,
    replicas: world.replicas.length,
    callers: CALLERS,
    network,
  });
  try {
    const errors = await campaign(world, recorder, {
      seed,
      callers: CALLERS,
      forced,
      faults: (nemesis) => nemesis.run(durationS * 1000),
    });
    for (const error of errors) console.error(`chaos: nemesis: ${error}`);
  } finally {
    await world.close();
  }
  return recorder.events;
}

/** `--network`, or namespaces when this machine has them (root, ip, nft), else loopback: said either way. */
function networkMode(asked: string | undefined): NetworkMode {
  const unavailable = namespacesUnavailable();
  if (asked !== undefined && asked !== 'namespaces' && asked !== 'loopback')
    throw new Error(`--network ${asked}: namespaces or loopback`);
  if (asked === 'namespaces' && unavailable !== undefined) throw new Error(`--network namespaces: ${unavailable}`);
  const mode: NetworkMode = asked ?? (unavailable === undefined ? 'namespaces' : 'loopback');
  const why =
    asked !== undefined
      ? 'as asked'
      : mode === 'namespaces'
        ? 'links can be cut; --network loopback for none'
        : `no namespaces here: ${unavailable ?? ''}`;
  console.log(`chaos: network ${mode} (${why})`);
  return mode;
}

function report(result: CheckResult): number {
  const { payments } = result;
  console.log(
    `chaos: ${payments.total} payments (ok ${payments.ok}, fail ${payments.fail}, unknown ${payments.info}, ` +
      `${result.infoInLedger} of them made), ${result.attempts} attempts; faults ${JSON.stringify(result.faults)}; ` +
      `password logins ${result.logins.password} (bound ${result.logins.bound}); postbacks delivered ` +
      `${result.postbacksDelivered}, worst delay ${result.maxPostbackDelayS} s`,
  );
  if (result.wipes > 0 || result.faults['redis-restart-empty'] !== undefined) {
    console.log(
      `chaos: ${result.wipes} Redis wipes (counted by each replica: ${result.wipesNoticed.join(', ')}); explained ` +
        `by them: ${result.wipeDuplicates} payments made twice, ${result.postbacksLostToWipes} postbacks lost`,
    );
  }
  for (const item of result.explained) console.log(`EXPLAINED BY A WIPE ${item.name}: ${item.detail}`);
  for (const violation of result.violations) console.log(`VIOLATION ${violation.name}: ${violation.detail}`);
  console.log(
    result.violations.length === 0 ? 'chaos: no violations' : `chaos: ${result.violations.length} violations`,
  );
  return result.violations.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(2);
  },
);
