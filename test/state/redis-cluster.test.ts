// Fleet state on a Redis Cluster of three primaries (real redis-server processes): the store and keeper contracts,
// a fleet of sidecars sharing the token, postback memory and idempotency keys through it, and the account's hash
// slot moved to another primary mid-traffic (resharding), which node-redis follows (MOVED, ASK).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { accountTag, DEFAULT_REDIS_KEY_PREFIX } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { describeKeeperContract, freshKey, gatewayAnswer, keeperOn } from '../idempotency/keeper-contract.js';
import { deliver, gatewayKeys, ApplicationStub, signPostback, startSignedReceiver } from '../postback/support.js';
import { freshDeposit, newKey, send, type Reply } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startCluster, type TestCluster } from '../support/redis-topologies.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { describeStateStoreContract } from './store-contract.js';
import { check } from '../../src/cli/check.js';
import { runCommand } from '../tools/run-command.js';

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster(3);
});
after(async () => {
  await cluster.close();
});

const TAG = accountTag('https://gateway.test', 'cluster@example.test');

async function openStore(): Promise<RedisStateStore> {
  const nodes = cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port }));
  const store = new RedisStateStore({ topology: { mode: 'cluster', nodes }, accountTag: TAG, commandTimeoutMs: 1_000 });
  assert.equal(await store.whenAvailable(10_000), true, 'the store connects to the cluster');
  return store;
}

describeStateStoreContract('redis cluster', openStore);
describeKeeperContract('redis cluster', openStore);

describe('a fleet on a Redis Cluster', () => {
  let keys: TestKeys;
  let simulator: RunningSimulator;
  const pods: TestSidecar[] = [];
  before(async () => {
    keys = await makeKeys();
    simulator = await startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
      loginRevokesRefresh: true,
    });
    const env = await sidecarEnv(keys, simulator.baseUrl, { ...cluster.env, SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '1000' });
    for (let i = 0; i < 3; i++) {
      const pod = await startTestSidecar(env);
      await waitUntilReady(pod.sidecar, 10_000);
      pods.push(pod);
    }
  });
  after(async () => {
    await Promise.all(pods.map((pod) => pod.stop()));
    await simulator.close();
  });

  it('three sidecars share one token: one password login', () => {
    const tokens = new Set(pods.map((pod) => pod.sidecar.tokens.usableToken()?.accessToken.reveal()));
    assert.equal(tokens.size, 1);
    assert.equal(simulator.tokenGrants().password, 1);
  });

  it('a key answered through one sidecar is replayed by another, nothing sent twice', async () => {
    const [key, body] = [newKey(), freshDeposit()];
    const first = await send(pods[0]!.sidecar.egressUrl, key, body);
    const second = await send(pods[1]!.sidecar.egressUrl, key, body);
    assert.equal(first.status, 200);
    assert.equal(second.replayed, true);
    assert.deepEqual(second.body, first.body);
  });

  it("the account's slot moved to another primary mid-traffic: every payment answered, replays intact", async (t) => {
    const slot = Number(
      (await cluster.nodes[0]!.cli('CLUSTER', 'KEYSLOT', `${DEFAULT_REDIS_KEY_PREFIX}{${accountTagOfPods()}}:x`))[0],
    );
    const owner = await cluster.ownerOf(slot);
    const target = (owner + 1) % cluster.nodes.length;
    const answers: Array<{ first: Reply; second: Reply }> = [];
    let moving = true;
    const traffic = (async () => {
      while (moving || answers.length < 60) {
        const [key, body] = [newKey(), freshDeposit()];
        const first = await send(pods[answers.length % 3]!.sidecar.egressUrl, key, body);
        const second = await send(pods[(answers.length + 1) % 3]!.sidecar.egressUrl, key, body);
        answers.push({ first, second });
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 300));
    await cluster.moveSlot(slot, target);
    moving = false;
    await traffic;
    assert.equal(await cluster.ownerOf(slot), target, 'the slot changed primaries');
    t.diagnostic(`${answers.length} keyed payments, each sent twice, while slot ${slot} moved ${owner} -> ${target}`);
    for (const { first, second } of answers) {
      assert.equal(first.status, 200, `first answer ${first.status} ${first.code ?? ''}`);
      assert.equal(second.replayed, true, `second answer ${second.status} ${second.code ?? ''}`);
    }
    const invoices = simulator.transactions().map((txn) => txn.invoice_no);
    assert.equal(new Set(invoices).size, invoices.length, 'no payment reached the gateway twice');
  });

  function accountTagOfPods(): string {
    return accountTag(simulator.baseUrl, TEST_USERNAME);
  }
});

describe('postback memory on a Redis Cluster: two receivers', () => {
  it('a postback replayed to the other replica is answered 200 duplicate and forwarded once', async () => {
    const [gateway, webhook] = await Promise.all([gatewayKeys(), new ApplicationStub().start()]);
    const first = await startSignedReceiver(gateway, cluster.env, webhook);
    const second = await startSignedReceiver(gateway, cluster.env, webhook);
    try {
      const postback = await signPostback(gateway.privateKeyPem);
      assert.deepEqual((await deliver(first.receiverUrl, postback)).body, { status: 'forwarded' });
      const replay = await deliver(second.receiverUrl, postback);
      assert.equal(replay.status, 200);
      assert.deepEqual(replay.body, { status: 'duplicate' });
      assert.equal(webhook.received.filter((r) => r.body.toString('utf8') === postback.payload).length, 1);
    } finally {
      await first.running.stop();
      await second.running.stop();
      await webhook.stop();
    }
  });
});

describe('idempotency keys on a Redis Cluster: two stores', () => {
  it('a key answered through one store is replayed through another', async () => {
    const [one, two] = await Promise.all([openStore(), openStore()]);
    try {
      const key = freshKey();
      const claim = await keeperOn(one).keeper.claim(key, 'fp', 'req-1');
      assert.equal(claim.kind, 'new');
      if (claim.kind === 'new') await keeperOn(one).keeper.complete(claim.ticket, gatewayAnswer);
      assert.deepEqual(await keeperOn(two).keeper.claim(key, 'fp', 'req-2'), {
        kind: 'replayed',
        answer: gatewayAnswer,
      });
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });
});

// Last: it breaks the cluster (a slot without a primary).
describe('check against a Redis Cluster', () => {
  let simulator: RunningSimulator;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    const keys = await makeKeys();
    simulator = await startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
    });
    env = await sidecarEnv(keys, simulator.baseUrl, cluster.env);
  });
  after(() => simulator.close());

  it('reports the primaries, replicas and slots it found', async () => {
    const run = await runCommand(check, [], env);
    assert.equal(run.code, 0, run.stdout);
    assert.match(
      run.stdout,
      /^✔ state store: redis cluster via 127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+: 3 primaries, 0 replicas, 16384 of 16384 slots covered; PING answered/m,
    );
  });

  it('refuses a cluster with a slot no primary serves', async () => {
    // On every node, so that whichever seed the client asks already knows.
    for (const node of cluster.nodes) await node.cli('CLUSTER', 'DELSLOTS', '0');
    const run = await runCommand(check, [], env);
    assert.equal(run.code, 1);
    assert.match(
      run.stdout,
      /^✘ state store: redis cluster via .*16383 of 16384 slots covered; the cluster does not cover every hash slot/m,
    );
  });
});
