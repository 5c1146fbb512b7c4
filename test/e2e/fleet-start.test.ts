// Found by the chaos run (seed 20261126, docs/reliability.md): replicas started together while their Sentinels were
// slow to name the primary (a loaded machine) waited for the store a fixed time, then each logged in alone; on a
// gateway where a login revokes the tokens before it, they logged each other out and callers got 401 FAILED. Here
// each Sentinel answers a new connection only after 5 s, as a slow one does, without ever failing: the stores
// connect after the start's own wait (FIRST_CONNECT_WAIT_MS, 10 s) is over, and the first tokens wait on for them.
import assert from 'node:assert/strict';
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { startSimulator } from '@signing-sidecar/simulator';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startSentinelSet } from '../support/redis-topologies.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { deposit, postJson } from '../support/sim-world.js';

const SLOW_FIRST_ANSWER_MS = 5_000;

/** A TCP relay to `port` that holds each new connection `delayMs` before it connects it through. */
async function slowRelay(port: number, delayMs: number): Promise<{ address: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    sockets.add(client);
    client.pause();
    setTimeout(() => {
      const upstream = createConnection({ host: '127.0.0.1', port });
      sockets.add(upstream);
      client.pipe(upstream).pipe(client);
      client.resume();
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    }, delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: relayPort } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${relayPort}`,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The simulator, on which a login revokes the refresh tokens before it, and a Sentinel set. */
async function startWorld() {
  const keys = await makeKeys();
  const [simulator, set] = await Promise.all([
    startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
      loginRevokesRefresh: true,
    }),
    startSentinelSet(),
  ]);
  return { keys, simulator, set };
}

describe('a fleet started together on a Redis slow to give its first answer', () => {
  it('waits for the store before its first token: one password login, no 401 FAILED', async () => {
    const { keys, simulator, set } = await startWorld();
    const relays = await Promise.all(set.sentinelPorts.map((port) => slowRelay(port, SLOW_FIRST_ANSWER_MS)));
    const pods: TestSidecar[] = [];
    try {
      const env = await sidecarEnv(keys, simulator.baseUrl, {
        ...set.env,
        SIDECAR_REDIS_SENTINELS: relays.map((relay) => relay.address).join(','),
      });
      // Each kept as it starts: one that fails leaves the others to be stopped.
      await Promise.all([0, 1, 2].map(async () => pods.push(await startTestSidecar(env))));
      const connectedAtStart = pods.map((pod) => pod.sidecar.store.isAvailable());
      await Promise.all(pods.map((pod) => waitUntilReady(pod.sidecar, 60_000)));
      const answers = await Promise.all(
        Array.from({ length: 12 }, (_, i) => postJson(pods[i % 3]!.sidecar.egressUrl, deposit())),
      );
      assert.deepEqual(
        answers.map((a) => a.status),
        answers.map(() => 200),
        answers.map((a) => `${a.status} ${a.code ?? ''}`).join(', '),
      );
      assert.equal(simulator.tokenGrants().password, 1, 'one login for the fleet');
      const logs = pods.map((pod) => pod.logs.text).join('');
      assert.equal(logs.includes('"event":"token.store_fallback"'), false, 'no replica got a token of its own');
      assert.ok(
        connectedAtStart.includes(false),
        `a store still connecting when its sidecar started serving: ${connectedAtStart.join(', ')}`,
      );
    } finally {
      await Promise.all(pods.map((pod) => pod.stop()));
      await Promise.all(relays.map((relay) => relay.close()));
      await Promise.all([simulator.close(), set.close()]);
    }
  });

  // A Sentinel pod restarting while the replicas start (a rolling update of the Redis chart): the first Sentinel
  // listed refuses. node-redis asks the next; a store that counted the refusal as its failure would get each replica
  // a login alone.
  it('the first Sentinel listed down: the replicas connect through the next, one password login', async () => {
    const { keys, simulator, set } = await startWorld();
    const pods: TestSidecar[] = [];
    try {
      await set.killSentinel(0);
      const env = await sidecarEnv(keys, simulator.baseUrl, set.env);
      // Each kept as it starts: one that fails leaves the others to be stopped.
      await Promise.all([0, 1, 2].map(async () => pods.push(await startTestSidecar(env))));
      await Promise.all(pods.map((pod) => waitUntilReady(pod.sidecar, 30_000)));
      const answers = await Promise.all(pods.map((pod) => postJson(pod.sidecar.egressUrl, deposit())));
      assert.deepEqual(
        answers.map((a) => a.status),
        [200, 200, 200],
        answers.map((a) => `${a.status} ${a.code ?? ''}`).join(', '),
      );
      assert.equal(simulator.tokenGrants().password, 1, 'one login for the fleet');
      const logs = pods.map((pod) => pod.logs.text).join('');
      // A command over its 100 ms timeout on a loaded host takes a store down for a moment too, and costs no login
      // (a login alone waits for the store): only the refusal must not count.
      const downs = logs.split('\n').filter((line) => line.includes('"event":"state_store.down"'));
      assert.deepEqual(
        downs.filter((line) => line.includes('ECONNREFUSED')),
        [],
        'no store counted the refusal as down',
      );
      assert.equal(logs.includes('"event":"token.store_fallback"'), false, 'no replica got a token of its own');
    } finally {
      await Promise.all(pods.map((pod) => pod.stop()));
      await Promise.all([simulator.close(), set.close()]);
    }
  });
});
