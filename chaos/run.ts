// npm run chaos -- [--duration SECONDS] [--seed N] [--out DIR]   a run: history, check, summary and report in DIR
// npm run chaos -- --check FILE [--out DIR]                      the checker alone on a history (exit 1 on a violation);
//                                                                with --out, its summary and report there too
import { setMaxListeners } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { mulberry32 } from '../test/support/random.js';
import { check, LIVENESS_BOUND_MS, type CheckResult } from './checker.js';
import { readHistory, toJsonl, type HistoryEvent, type LedgerStatus } from './history.js';
import { Nemesis, type PlanKind } from './nemesis.js';
import { Recorder } from './recorder.js';
import { summarize, writeReport } from './report.js';
import { callerLoop, pay, type Caller } from './workload.js';
import { sleep, startWorld, type World } from './world.js';

const CALLERS = 16;
/** How long the run waits after the liveness bound for the gateway's last postbacks to reach the application. */
const POSTBACK_GRACE_MS = 60_000;

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '60' },
      seed: { type: 'string' },
      out: { type: 'string' },
      check: { type: 'string' },
      // A fault kind that must occur (repeatable): it takes the place of a draw from a third of the run on.
      fault: { type: 'string', multiple: true },
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
  mkdirSync(out, { recursive: true });
  // The simulator's shutdown signal has a listener per postback waiting for its retry: hundreds while the
  // application is down, which is no leak.
  setMaxListeners(10_000);
  const history = await run(seed, duration, out, (values.fault ?? []) as PlanKind[]);
  writeFileSync(join(out, 'history.jsonl'), toJsonl(history));
  const result = check(history);
  await writeReport(out, history, summarize(history, result));
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

async function run(seed: number, durationS: number, out: string, forced: readonly PlanKind[]): Promise<HistoryEvent[]> {
  const recorder = new Recorder();
  const world = await startWorld(out, (replica, code, signal) =>
    recorder.record({ type: 'crash', replica, code, signal }),
  );
  running = world;
  recorder.record({ type: 'run', seed, duration_s: durationS, replicas: world.replicas.length, callers: CALLERS });
  world.application.onPostback((p) =>
    recorder.record({
      type: 'postback',
      transaction_id: p.transactionId,
      status: p.status,
      postback_id: p.postbackId,
      attempt: p.attempt,
      verified: p.verified,
    }),
  );
  const ledger = new Map<string, { invoice_no: string; status: LedgerStatus }>();
  const readLedger = async (): Promise<void> => {
    const res = await fetch(`${world.simulator.listenUrl}/_sim/transactions`);
    const { transactions } = (await res.json()) as {
      transactions: { transaction_id: string; invoice_no: string; status: LedgerStatus }[];
    };
    for (const tx of transactions) ledger.set(tx.transaction_id, { invoice_no: tx.invoice_no, status: tx.status });
  };
  // The simulator keeps its newest 10 000 transactions: read often enough that none is forgotten unread.
  let reading = true;
  const ledgerReader = (async () => {
    while (reading) {
      await readLedger().catch(() => {});
      await sleep(5_000);
    }
  })();
  try {
    const callers: Caller[] = Array.from({ length: CALLERS }, (_, process) => ({
      process,
      random: mulberry32(seed + 1 + process),
    }));
    let paying = true;
    const loops = callers.map((caller) => callerLoop(world, recorder, caller, () => paying, `s${seed}`));
    const nemesis = new Nemesis(world, recorder, mulberry32(seed ^ 0x5eed), forced);
    await nemesis.run(durationS * 1000);
    paying = false;
    await Promise.all(loops);
    for (const error of nemesis.errors) console.error(`chaos: nemesis: ${error}`);
    await liveness(world, recorder, callers, seed);
    await waitForPostbacks(recorder, readLedger);
  } finally {
    reading = false;
    await ledgerReader;
    recorder.record({ type: 'wipes_noticed', per_replica: await world.wipeCounts() });
    const grants = world.simulator.tokenGrants();
    recorder.record({ type: 'logins', password: grants.password, refresh: grants.refresh });
    await world.close();
  }
  for (const [id, tx] of ledger) {
    recorder.record({ type: 'ledger', transaction_id: id, invoice_no: tx.invoice_no, status: tx.status });
  }
  return recorder.events;
}

/** After the last fault healed: every replica ready, a final round of payments, the inbox drained. */
async function liveness(world: World, recorder: Recorder, callers: readonly Caller[], seed: number): Promise<void> {
  const healedAt = recorder.now();
  const deadline = healedAt + 2 * LIVENESS_BOUND_MS;
  let replicasReadyAt: number | null = null;
  while (recorder.now() < deadline) {
    if (await world.allReady()) {
      replicasReadyAt = recorder.now();
      break;
    }
    await sleep(200);
  }
  await Promise.all(callers.map((caller) => pay(world, recorder, caller, `s${seed}-final-p${caller.process}`, true)));
  const finalRoundDoneAt = recorder.now();
  let inboxDrainedAt: number | null = null;
  while (recorder.now() < deadline) {
    if ((await world.inboxPending().catch(() => -1)) === 0) {
      inboxDrainedAt = recorder.now();
      break;
    }
    await sleep(250);
  }
  recorder.record({
    type: 'liveness',
    healed_at: healedAt,
    replicas_ready_at: replicasReadyAt,
    final_round_done_at: finalRoundDoneAt,
    inbox_drained_at: inboxDrainedAt,
  });
}

/** Until every completed transaction's postback reached the application, or the grace period ran out. */
async function waitForPostbacks(recorder: Recorder, readLedger: () => Promise<void>): Promise<void> {
  const deadline = recorder.now() + POSTBACK_GRACE_MS;
  for (;;) {
    const completed = new Set(recorder.events.flatMap((e) => (e.type === 'complete' ? [e.transaction_id] : [])));
    const delivered = new Set(
      recorder.events.flatMap((e) => (e.type === 'postback' && e.verified ? [e.transaction_id] : [])),
    );
    if ([...completed].every((id) => delivered.has(id)) || recorder.now() > deadline) break;
    await sleep(500);
  }
  await readLedger();
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
