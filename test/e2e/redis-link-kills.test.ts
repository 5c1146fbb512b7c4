// One lost Redis connection costs a retry, not a refusal. A `serve` process on a real primary and replica (writes
// acknowledged by the replica), 16 callers paying with fresh Idempotency-Keys through the real simulator, while one of
// the sidecar's connections to Redis (whichever: the commands connection, pub/sub, an acknowledged write's) is killed
// every 1.5 s. Each payment is answered; at most 1 % are refused, and every 2xx is one transaction at the gateway.
// The callers pay about 30 times a second between them: at a rate where each kill meets a payment or two in flight, a
// refusal per lost connection would be several percent.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { freshDeposit, newKey, send } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { mulberry32 } from '../support/random.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startRedis, startReplica, type TestRedis } from '../support/redis-server.js';
import { startSentinelSet } from '../support/redis-topologies.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { waitFor } from '../support/wait-for.js';

const CALLERS = 16;
/** Each caller pays about once a second: a kill then meets a payment or two in flight, not dozens. */
const PAUSE_BETWEEN_PAYMENTS_MS = 1_000;
const RUN_MS = 30_000;
const KILL_EVERY_MS = 1_500;

interface Topology {
  /** The node the sidecar writes to. */
  readonly primary: TestRedis;
  readonly env: NodeJS.ProcessEnv;
  close(): Promise<void>;
}

async function standalone(): Promise<Topology> {
  const primary = await startRedis();
  const replica = await startReplica(primary);
  return {
    primary,
    env: { SIDECAR_REDIS_URL: primary.url },
    close: async () => {
      await replica.close();
      await primary.close();
    },
  };
}

async function sentinel(): Promise<Topology> {
  const set = await startSentinelSet({ replicas: 1 });
  return { primary: set.primary, env: { ...set.env }, close: () => set.close() };
}

let keys: TestKeys;
let simulator: RunningSimulator;
before(async () => {
  keys = await makeKeys();
  simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
});
after(async () => {
  await simulator?.close();
});

async function startFleetReplica(topology: Topology): Promise<SpawnedSidecar> {
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_STATE_STORE: 'redis',
    ...topology.env,
    SIDECAR_REDIS_MIN_REPLICAS_ACKED: '1',
    // A loaded test machine's margin; the kills, not the machine, are what this test is about.
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '500',
  });
  const sidecar = await spawnSidecar(env, 30_000);
  await waitFor('ready', async () => (await fetch(`${sidecar.adminUrl}/readyz`)).status === 200, 20_000);
  return sidecar;
}

/** The sidecar's client connections on the primary (not the replica's, nor the asking redis-cli's own). */
async function sidecarConnections(primary: TestRedis): Promise<string[]> {
  const lines = await primary.cli('CLIENT', 'LIST', 'TYPE', 'normal');
  return lines
    .filter((line) => !/ cmd=client\|list /.test(line))
    .map((line) => /(?:^| )id=(\d+)/.exec(line)?.[1] ?? '');
}

async function killingOneLinkEvery1500Ms(primary: TestRedis, sidecar: SpawnedSidecar): Promise<void> {
  const random = mulberry32(20261129);
  const answers: string[] = [];
  const paid: string[] = [];
  const until = Date.now() + RUN_MS;
  let kills = 0;
  const killer = (async () => {
    while (Date.now() < until) {
      await sleep(KILL_EVERY_MS);
      const ids = (await sidecarConnections(primary)).filter((id) => id !== '');
      const id = ids[Math.floor(random() * ids.length)];
      if (id === undefined) continue;
      await primary.cli('CLIENT', 'KILL', 'ID', id);
      kills++;
    }
  })();
  const callers = Array.from({ length: CALLERS }, async () => {
    while (Date.now() < until) {
      const payment = freshDeposit();
      const reply = await send(sidecar.proxyUrl, newKey(), payment);
      answers.push(`${reply.status} ${reply.code ?? ''}`.trim());
      if (reply.status < 300) paid.push(payment);
      await sleep(random() * PAUSE_BETWEEN_PAYMENTS_MS);
    }
  });
  await Promise.all([killer, ...callers]);
  const refused = answers.filter((answer) => !answer.startsWith('2'));
  const summary = [...new Set(refused)].map((a) => `${a}: ${refused.filter((r) => r === a).length}`).join(', ');
  assert.ok(kills >= 10, `${kills} connections killed`);
  assert.ok(answers.length >= 400, `${answers.length} payments answered`);
  assert.ok(
    refused.length <= answers.length / 100,
    `${refused.length} of ${answers.length} refused (${summary}) with ${kills} connections killed`,
  );
  const invoices = simulator.transactions().map((tx) => tx.invoice_no);
  assert.equal(new Set(invoices).size, invoices.length, 'no payment reached the gateway twice');
  for (const payment of paid) {
    const invoice = (JSON.parse(payment) as { invoice_no: string }).invoice_no;
    assert.ok(invoices.includes(invoice), `${invoice} answered 2xx and held by the gateway`);
  }
  console.log(`# ${answers.length} payments, ${refused.length} refused (${summary || 'none'}), ${kills} kills`);
}

for (const [name, start] of [
  ['standalone', standalone],
  ['Sentinel', sentinel],
] as const) {
  describe(`${name}: a Redis connection of the sidecar killed every 1.5 s`, { timeout: 120_000 }, () => {
    let topology: Topology;
    let sidecar: SpawnedSidecar;
    before(async () => {
      topology = await start();
      sidecar = await startFleetReplica(topology);
    });
    after(async () => {
      sidecar?.child.kill('SIGKILL');
      await sidecar?.exited;
      await topology?.close();
    });

    it('at most 1 % of keyed payments refused, none sent twice, every 2xx one transaction', () =>
      killingOneLinkEvery1500Ms(topology.primary, sidecar));
  });
}
