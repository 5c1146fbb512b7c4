// A campaign in a running world: callers paying while faults come and heal, then what the checker needs besides
// their answers: liveness after the last fault, the last postbacks, the logins, the wipes counted, the ledger.
// `npm run chaos` runs one with the seeded nemesis; a test can run one with faults of its choosing.
import { mulberry32 } from '../test/support/random.js';
import { LIVENESS_BOUND_MS } from './checker.js';
import type { LedgerStatus } from './history.js';
import { Nemesis, type PlanKind } from './nemesis.js';
import type { Recorder } from './recorder.js';
import { callerLoop, pay, type Caller } from './workload.js';
import { sleep, type World } from './world.js';

/** How long the run waits after the liveness bound for the gateway's last postbacks to reach the application. */
const POSTBACK_GRACE_MS = 60_000;

export interface CampaignOptions {
  readonly seed: number;
  readonly callers: number;
  /** Fault kinds the nemesis must bring (--fault). */
  readonly forced?: readonly PlanKind[];
  /** The faults, while the callers pay: resolves once the last one has healed. */
  readonly faults: (nemesis: Nemesis) => Promise<void>;
}

/** Records the campaign into `recorder` and resolves with the nemesis's errors; the world is left running. */
export async function campaign(world: World, recorder: Recorder, options: CampaignOptions): Promise<string[]> {
  const { seed } = options;
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
    const answer = await world.control.call('GET', '/_sim/transactions');
    const { transactions } = JSON.parse(answer.text) as {
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
  let errors: string[];
  try {
    const callers: Caller[] = Array.from({ length: options.callers }, (_, process) => ({
      process,
      random: mulberry32(seed + 1 + process),
    }));
    let paying = true;
    const loops = callers.map((caller) => callerLoop(world, recorder, caller, () => paying, `s${seed}`));
    const nemesis = new Nemesis(world, recorder, mulberry32(seed ^ 0x5eed), options.forced);
    try {
      await options.faults(nemesis);
    } finally {
      paying = false;
      await Promise.all(loops);
    }
    errors = nemesis.errors;
    await liveness(world, recorder, callers, seed);
    await waitForPostbacks(recorder, readLedger);
  } finally {
    reading = false;
    await ledgerReader;
    recorder.record({ type: 'wipes_noticed', per_replica: await world.wipeCounts() });
    const grants = world.simulator.tokenGrants();
    recorder.record({ type: 'logins', password: grants.password, refresh: grants.refresh });
  }
  for (const [id, tx] of ledger) {
    recorder.record({ type: 'ledger', transaction_id: id, invoice_no: tx.invoice_no, status: tx.status });
  }
  return errors;
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
