// Fleet mode on a Redis that comes back empty (docs/fleet.md, "A Redis that comes back empty"): three real `serve`
// processes share one real redis-server in front of the real simulator (a login revokes every earlier access and
// refresh token), under payments, while Redis is flushed, or restarted empty after an outage of a few seconds. The
// token record and its lock are gone each time; the replicas must share their token again instead of logging in one
// after another and revoking each other's tokens.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startSimulator } from '@signing-sidecar/simulator';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startRedis } from '../support/redis-server.js';
import { sidecarEnv } from '../support/sidecar.js';
import { deposit, postJson } from '../support/sim-world.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { waitFor } from '../support/wait-for.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

/** One unlabelled series of a `serve` process, from its admin port. */
async function metric(pod: SpawnedSidecar, name: string): Promise<number> {
  const text = await (await fetch(`${pod.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

/** Payments from `workers` callers, each to the next pod in turn, until stopped: every answer's status and code. */
function startTraffic(pods: readonly SpawnedSidecar[], workers = 3): { stop(): Promise<string[]> } {
  const answers: string[] = [];
  let running = true;
  let turn = 0;
  const work = async () => {
    while (running) {
      const pod = pods[turn++ % pods.length]!;
      const answer = await postJson(pod.proxyUrl, deposit()).catch((err: Error) => ({ status: 0, code: err.name }));
      answers.push(`${answer.status} ${answer.code ?? ''}`.trim());
      await sleep(60);
    }
  };
  const loops = Array.from({ length: workers }, work);
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      return answers;
    },
  };
}

function summary(answers: readonly string[]): Record<string, number> {
  const by: Record<string, number> = {};
  for (const answer of answers) by[answer] = (by[answer] ?? 0) + 1;
  return by;
}

interface FleetRun {
  readonly answers: string[];
  readonly grants: { password: number; refresh: number };
  readonly wipes: number[];
  readonly pods: readonly SpawnedSidecar[];
}

/**
 * How long a restarted Redis stays away, as when a container runtime restarts the process: with 10 s tokens
 * refreshed 4-5 s ahead, a refresh falls due during it more often than not, and a replica whose client reconnects
 * last can reach the end of its token (2 s before expiry) before it sees the store back.
 */
const OUTAGE_MS = 2_500;

/** How many times the pods logged `event` (a JSON log line on stdout). */
function logged(pods: readonly SpawnedSidecar[], event: string): number {
  return pods.reduce((n, pod) => n + pod.output().stdout.split(`"event":"${event}"`).length - 1, 0);
}

/** Three `serve` processes under payments while Redis is wiped once per entry of `wipes`, 3 s apart. */
async function fleetThrough(
  wipes: ReadonlyArray<'flush' | 'restart'>,
  t: { diagnostic(text: string): void },
): Promise<FleetRun> {
  const keys = await makeKeys();
  const [simulator, redis] = await Promise.all([
    startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
      loginRevokesRefresh: true,
      // 10 s tokens, refreshed 4-5 s ahead: the fleet refreshes every 5 to 6 s, so refreshes fall between a wipe
      // and the moment every replica has noticed it.
      accessTokenTtlSeconds: 10,
    }),
    startRedis(),
  ]);
  cleanups.push(
    () => simulator.close(),
    () => redis.close(),
  );
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_LOG_LEVEL: 'info',
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000',
    SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS: '4',
    SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS: '5',
  });
  const pods = await Promise.all([spawnSidecar(env), spawnSidecar(env), spawnSidecar(env)]);
  for (const pod of pods) cleanups.push(() => pod.kill());
  await waitFor(
    'three pods with a token',
    async () => (await Promise.all(pods.map((pod) => fetch(`${pod.adminUrl}/healthz/token`)))).every((r) => r.ok),
    15_000,
  );
  const traffic = startTraffic(pods);
  await sleep(1_000);
  for (const wipe of wipes) {
    if (wipe === 'restart') {
      await redis.stop();
      await sleep(OUTAGE_MS);
      await redis.start(); // empty: nothing is persisted
    } else assert.deepEqual(await redis.cli('FLUSHALL'), ['OK']);
    await sleep(3_000);
  }
  const answers = await traffic.stop();
  const grants = simulator.tokenGrants();
  const noticed = await Promise.all(pods.map((pod) => metric(pod, 'signing_sidecar_state_store_wipes_total')));
  t.diagnostic(`${answers.length} payments ${JSON.stringify(summary(answers))}; grants ${JSON.stringify(grants)}`);
  t.diagnostic(`wipes noticed per pod: ${noticed.join(', ')}`);
  const alone = logged(pods, 'token.store_fallback');
  t.diagnostic(
    `grants tried alone with the store away: ${alone}; looked again: ${logged(pods, 'token.looking_again')}`,
  );
  assert.ok(answers.length > 100, `traffic flowed: ${answers.length} payments`);
  assert.ok(
    noticed.every((count) => count >= 1),
    'every pod noticed the wipes',
  );
  await waitFor(
    'the three pods on one token generation again',
    async () => {
      const generations = await Promise.all(pods.map((pod) => metric(pod, 'signing_sidecar_token_generation')));
      return generations[0]! > 0 && generations.every((g) => g === generations[0]);
    },
    15_000,
  );
  return { answers, grants, wipes: noticed, pods };
}

describe('fleet mode on a Redis that comes back empty', { timeout: 120_000 }, () => {
  it('three serve processes, Redis flushed four times under payments: one password login, no 401 reaches a caller', async (t) => {
    const run = await fleetThrough(['flush', 'flush', 'flush', 'flush'], t);
    assert.deepEqual(summary(run.answers), { '200': run.answers.length }, 'every payment answered 200: no 401 FAILED');
    assert.equal(run.grants.password, 1, 'one password login for the whole run');
    assert.ok(run.grants.refresh >= 1, `the fleet refreshed through the wipes (${run.grants.refresh} times)`);
  });

  // A restart is a wipe and an outage: a replica whose token is due keeps it while Redis is away; one whose token
  // reaches its end refreshes alone, and a replica whose refresh of the same refresh token is then refused (rotated)
  // looks at the fleet's record again, where the lone one shares its successor, instead of logging in and revoking
  // every replica's token.
  it('three serve processes, Redis restarted empty twice under payments: one password login, no 401 reaches a caller', async (t) => {
    const run = await fleetThrough(['flush', 'restart', 'restart'], t);
    assert.deepEqual(summary(run.answers), { '200': run.answers.length }, 'every payment answered 200: no 401 FAILED');
    assert.equal(run.grants.password, 1, 'one password login for the whole run');
    const after = await Promise.all(run.pods.map((pod) => postJson(pod.proxyUrl, deposit())));
    assert.deepEqual(
      after.map((answer) => answer.status),
      [200, 200, 200],
      'a payment through each pod once the fleet is on one token again',
    );
  });
});
