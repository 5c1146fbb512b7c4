// npm run bench:stalls -- [--program PATH] [--seconds 90] [--seed N] [--down-after-ms 1000] [--no-pauses] [--rate N]
//
// Keyed payments through a fleet while its Redis primary stalls: three `serve` replicas on Redis with Sentinel (a
// primary, two replicas, writes acknowledged by both), 16 callers each paying with a fresh Idempotency-Key and
// retrying the same key on a retryable answer (409 in_progress, 503) as a client should, and a seeded schedule of
// primary pauses (SIGSTOP, 0.5-2.5 s, every 2-5 s). Prints what the callers got: payments completed and how long each
// took (retries included), every answer by status and code, and the outcome_unknown answers (each a payment its
// caller cannot know) with how many of them the gateway holds. `--program` runs another build (`dist/src/main.js` of
// another checkout, its node_modules beside it) under the same schedule: comparing two versions is two runs with one
// seed.
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { startSimulator } from '@signing-sidecar/simulator';
import { percentile } from './load.js';
import { freshDeposit, newKey, send, type Reply } from '../test/support/idempotent-calls.js';
import { makeKeys } from '../test/support/keys.js';
import { mulberry32 } from '../test/support/random.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../test/support/recording-gateway.js';
import { startSentinelSet } from '../test/support/redis-topologies.js';
import { sidecarEnv } from '../test/support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../test/support/spawned-sidecar.js';
import { waitFor } from '../test/support/wait-for.js';

const CALLERS = 16;
const REPLICAS = 3;
/** A caller's retry of the same key after a retryable answer. */
const RETRY_PAUSE_MS = 200;

const { values } = parseArgs({
  options: {
    program: { type: 'string', default: 'dist/src/main.js' },
    seconds: { type: 'string', default: '90' },
    seed: { type: 'string', default: '20261129' },
    // The Sentinels' down-after: 1 s fails a paused primary over (the issue's schedule); 10 s never does, so that
    // what a stall costs is measured without a failover's timing in it.
    'down-after-ms': { type: 'string', default: '1000' },
    // The same workload without a pause: the baseline a stall's cost is read against.
    'no-pauses': { type: 'boolean', default: false },
    // Payments started per second by all callers together (each caller on its own beat); 0: each starts its next
    // payment as soon as the last one ended, which saturates this machine, so CPU per payment counts as much as the
    // stalls. A paced load below saturation measures what the stalls alone cost.
    rate: { type: 'string', default: '0' },
  },
});
const runMs = Number(values.seconds) * 1_000;
const random = mulberry32(Number(values.seed));
const between = (min: number, max: number): number => Math.round(min + random() * (max - min));

const keys = await makeKeys();
const redis = await startSentinelSet({
  downAfterMs: Number(values['down-after-ms']),
  replicas: 2,
  args: ['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10'],
});
const simulator = await startSimulator({
  accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
});
const replicas: SpawnedSidecar[] = [];
try {
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_STATE_STORE: 'redis',
    ...redis.env,
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '500',
    SIDECAR_REDIS_MIN_REPLICAS_ACKED: '2',
    SIDECAR_LOG_LEVEL: 'info',
  });
  for (let i = 0; i < REPLICAS; i++) {
    const replica = await spawnSidecar(env, 30_000, [], { program: [resolve(values.program)] });
    replicas.push(replica);
    await waitFor('ready', async () => (await fetch(`${replica.adminUrl}/readyz`)).status === 200, 30_000);
  }
  const until = Date.now() + runMs;
  const pauses: number[] = [];
  const nemesis = (async () => {
    await sleep(3_000);
    while (!values['no-pauses'] && Date.now() < until) {
      const primaryAddress = await redis.currentPrimary();
      const node = redis.nodes.find((candidate) => primaryAddress.endsWith(`:${candidate.port}`));
      const pauseMs = between(500, 2_500);
      node?.freeze();
      await sleep(pauseMs);
      node?.thaw();
      pauses.push(pauseMs);
      await sleep(between(2_000, 5_000));
    }
  })();
  const answers = new Map<string, number>();
  let completed = 0;
  // Each an outcome_unknown answer's payment: whether the gateway holds it is read at the end.
  const unknownPayments: string[] = [];
  // From a payment's first attempt to its 2xx, retries included: what a stall costs a caller that waits it out.
  const completionMs: number[] = [];
  const beatMs = Number(values.rate) > 0 ? (CALLERS * 1_000) / Number(values.rate) : 0;
  const retryable = (reply: Reply): boolean => reply.status === 409 || reply.status === 503;
  const callers = Array.from({ length: CALLERS }, async (_, caller) => {
    const firstAt = Date.now() + (beatMs * caller) / CALLERS;
    for (let n = 0; Date.now() < until; n++) {
      const startAt = firstAt + n * beatMs;
      if (startAt > Date.now()) await sleep(startAt - Date.now());
      if (Date.now() >= until) break;
      const key = newKey();
      const payment = freshDeposit();
      const started = performance.now();
      for (let attempt = 0; Date.now() < until; attempt++) {
        const target = replicas[(caller + n + attempt) % REPLICAS]!;
        const reply = await send(target.proxyUrl, key, payment).catch(() => undefined);
        const label = reply === undefined ? 'no answer' : `${reply.status} ${reply.code ?? ''}`.trim();
        answers.set(label, (answers.get(label) ?? 0) + 1);
        if (reply?.code === 'sidecar.upstream.outcome_unknown') unknownPayments.push(payment);
        if (reply !== undefined && reply.status < 300) {
          completed++;
          completionMs.push(performance.now() - started);
        }
        if (reply === undefined || !retryable(reply)) break;
        await sleep(RETRY_PAUSE_MS);
      }
    }
  });
  await Promise.all([nemesis, ...callers]);
  const transactions = simulator.transactions();
  const invoices = new Set(transactions.map((tx) => tx.invoice_no));
  const invoiceOf = (payment: string): string => (JSON.parse(payment) as { invoice_no: string }).invoice_no;
  const quantile = (q: number): number => Math.round(percentile(completionMs, q));
  console.log(
    JSON.stringify(
      {
        program: values.program,
        seed: Number(values.seed),
        seconds: runMs / 1_000,
        pauses: pauses.length,
        pausedMs: pauses.reduce((sum, ms) => sum + ms, 0),
        rate: Number(values.rate),
        completed,
        completionMs: { p50: quantile(0.5), p99: quantile(0.99), p999: quantile(0.999), max: quantile(1) },
        outcomeUnknown: unknownPayments.length,
        outcomeUnknownMade: unknownPayments.filter((payment) => invoices.has(invoiceOf(payment))).length,
        gatewayTransactions: transactions.length,
        sentTwice: transactions.length - invoices.size,
        answers: Object.fromEntries([...answers].sort((a, b) => b[1] - a[1])),
      },
      null,
      2,
    ),
  );
} finally {
  await Promise.all(replicas.map((replica) => replica.kill()));
  await simulator.close();
  await redis.close();
}
