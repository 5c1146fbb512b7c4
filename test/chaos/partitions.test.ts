// The fault campaign's cut links, one kind at a time: a world in network namespaces (each Redis node, Sentinel and
// sidecar replica at its own address), payments and postbacks flowing, and each partition kind applied alone for a
// few seconds. For each, what an operator would see while it is on (a redis-cli from the cut namespace that gets no
// answer, a replica's store metric at 0, a Sentinel that alone calls the primary down), and at the end the checker's
// verdict over the whole history: clean. Then a restart from an older snapshot, which must take the data back.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { campaign } from '../../chaos/campaign.js';
import { check } from '../../chaos/checker.js';
import type { FaultEvent } from '../../chaos/history.js';
import type { Nemesis } from '../../chaos/nemesis.js';
import { PARTITION_KINDS, type PartitionKind } from '../../chaos/partitions.js';
import { Recorder } from '../../chaos/recorder.js';
import { sleep, startWorld, type World } from '../../chaos/world.js';
import { bundle } from '../../scripts/bundle.js';
import { METRICS } from '../../src/observability/metric-names.js';
import { namespacesUnavailable, prefixed, type Cut, type Party } from '../support/netns.js';
import type { TestRedis } from '../support/redis-server.js';
import { SENTINEL_MASTER } from '../support/redis-topologies.js';
import { scratchDir } from '../support/scratch.js';

const run = promisify(execFile);
const DIST = fileURLToPath(new URL('../../dist/', import.meta.url));
const skip = namespacesUnavailable();
const SEED = 41;
/** Fewer callers than a campaign's 16: the whole fleet shares this machine with the test runner. */
const CALLERS = 6;
/**
 * Each cut's length: long enough to be seen; for the primary, past the Sentinels' 1 s down-after and one election
 * that fails on a loaded machine (the next comes after twice the 5 s failover-timeout).
 */
const HOLD_MS: Record<PartitionKind, number> = {
  'partition-primary': 14_000,
  'partition-sidecar': 6_000,
  'partition-sentinels': 5_000,
  'one-way-loss': 4_000,
  'flapping-link': 8_000,
};
/** A redis-cli that gets no answer within this is cut off (an answer on this network takes milliseconds). */
const PING_TIMEOUT_MS = 1_500;

describe('the fault campaign cuts links', { skip }, () => {
  let world: World | undefined;
  // The replicas run the image's bundle, as the campaign does: made here from dist/src (npm ci's build) when missing.
  before(async () => {
    if (!existsSync(join(DIST, 'image', 'main.js'))) await bundle('main.js', join(DIST, 'src'), join(DIST, 'image'));
  });
  after(async () => {
    await world?.close();
  });

  it(
    'each partition kind alone, under payments and postbacks: seen while on, and a clean history',
    { timeout: 240_000 },
    async (t) => {
      const recorder = new Recorder();
      world = await startWorld(
        scratchDir('chaos-partitions-'),
        (replica, code, signal) => recorder.record({ type: 'crash', replica, code, signal }),
        { network: 'namespaces' },
      );
      const live = world;
      recorder.record({ type: 'run', seed: SEED, duration_s: 0, replicas: 3, callers: CALLERS, network: 'namespaces' });
      let nemesis: Nemesis | undefined;
      const errors = await campaign(live, recorder, {
        seed: SEED,
        callers: CALLERS,
        faults: async (given) => {
          nemesis = given;
          await sleep(2_000);
          for (const kind of PARTITION_KINDS) {
            await t.test(kind, async (sub) => {
              const fault = given.inflictOnce(kind, { holdMs: HOLD_MS[kind] });
              try {
                await SEEN[kind](live, sub);
              } finally {
                await fault;
              }
            });
            await sleep(1_000);
          }
        },
      });
      assert.deepEqual(errors, [], 'every fault healed without an error');
      const faults = recorder.events.filter((e): e is FaultEvent => e.type === 'fault');
      assert.deepEqual(
        faults.map((f) => f.kind),
        [...PARTITION_KINDS],
      );
      for (const fault of faults) t.diagnostic(`${fault.kind}: ${fault.detail ?? ''}`);
      const result = check(recorder.events);
      assert.deepEqual(
        result.violations.map((v) => `${v.name}: ${v.detail}`),
        [],
        `the checker's verdict (${result.payments.total} payments, ${result.postbacksDelivered} postbacks delivered)`,
      );
      assert.ok(result.payments.ok > 0 && result.postbacksDelivered > 0, 'payments and postbacks flowed');
      assert.deepEqual(live.links?.net.cuts(), [], 'every cut healed');

      // The rollback: data written after the snapshot is gone from the primary the Sentinels name afterwards.
      await t.test('redis-restart-snapshot', async () => {
        await nemesis?.inflictOnce('redis-restart-snapshot', { holdMs: 2_000 });
        const restart = recorder.events.find(
          (e): e is FaultEvent => e.type === 'fault' && e.kind === 'redis-restart-snapshot',
        );
        assert.equal(restart?.rolled_back, true, restart?.detail);
      });
    },
  );
});

/** What an operator would see while each kind is on: resolves once seen, throws if not seen before the heal. */
const SEEN: Record<PartitionKind, (world: World, t: TestContext) => Promise<void>> = {
  async 'partition-primary'(world, t) {
    // From its two replicas and three Sentinels.
    const [cut] = await cutsInForce(world, 5);
    const links = linksOf(world);
    const primary = party(world, cut.from);
    const node = nodeOf(world, primary);
    const replica = links.nodes.find((p) => p !== primary);
    const sidecar = links.replicas[0];
    assert.ok(replica !== undefined && sidecar !== undefined);
    assert.equal(
      await ping(primary, replica.address, nodeOf(world, replica).port),
      false,
      'the primary reaches no replica',
    );
    assert.equal(await ping(sidecar, primary.address, node.port), true, 'a sidecar still reaches the primary');
    await waitUntilHealed(world);
    await world.redis.settled(60_000);
    // The Sentinels promoted a replica; the old primary came back as one of its replicas.
    assert.notEqual(await world.redis.currentPrimary(), `${node.host}:${node.port}`, 'failed over');
    assert.equal((await node.cli('ROLE'))[0], 'slave', 'the old primary is a replica now');
    t.diagnostic(`${primary.name} cut from ${cut.to} and the others, then a replica`);
  },
  async 'partition-sidecar'(world, t) {
    // From three Redis nodes and three Sentinels.
    const [cut] = await cutsInForce(world, 6);
    const sidecar = party(world, cut.from);
    const index = linksOf(world).replicas.indexOf(sidecar);
    const primary = await world.primaryNode();
    assert.equal(await ping(sidecar, primary.host, primary.port), false, 'no answer from the primary');
    // The replica's own view, as its dashboard shows it: the store unavailable.
    await until(`replica ${index}'s ${METRICS.stateStoreUp} at 0`, async () => {
      return (await world.metric(index, METRICS.stateStoreUp)) === 0;
    });
    t.diagnostic(`replica ${index} saw its store down`);
  },
  async 'partition-sentinels'(world, t) {
    // From the two other Sentinels and the primary.
    const [cut] = await cutsInForce(world, 3);
    const links = linksOf(world);
    const isolated = links.sentinels.indexOf(party(world, cut.from));
    const before = await world.redis.currentPrimary();
    // It alone calls the primary down (subjectively): it cannot reach the others to agree.
    await until(`Sentinel ${isolated} flags the primary s_down`, async () =>
      (await sentinelFlags(world, isolated)).includes('s_down'),
    );
    for (const [index] of links.sentinels.entries()) {
      if (index !== isolated) assert.doesNotMatch(await sentinelFlags(world, index), /s_down/, `Sentinel ${index}`);
    }
    await waitUntilHealed(world);
    assert.equal(await world.redis.settled(60_000), before, 'no failover: one Sentinel has no quorum');
    t.diagnostic(`Sentinel ${isolated} alone saw the primary down`);
  },
  async 'one-way-loss'(world, t) {
    const [cut] = await cutsInForce(world, 1);
    assert.equal(cut.mode, 'one-way');
    const [from, to] = [party(world, cut.from), party(world, cut.to)];
    const sidecar = from.name.startsWith('sidecar') ? from : to;
    const primary = await world.primaryNode();
    // One direction is enough for a request to get no answer.
    assert.equal(await ping(sidecar, primary.host, primary.port), false, `${cut.from} -> ${cut.to} dropped`);
    t.diagnostic(`${cut.from} -> ${cut.to} dropped; ${sidecar.name} got no answer from the primary`);
  },
  async 'flapping-link'(world, t) {
    const [cut] = await cutsInForce(world, 1);
    const sidecar = party(world, cut.from);
    const primary = nodeOf(world, party(world, cut.to));
    // PINGs now and then over the flapping link: some answered, some not.
    const answers = new Set<boolean>();
    const deadline = Date.now() + HOLD_MS['flapping-link'];
    while (answers.size < 2 && Date.now() < deadline) {
      answers.add(await ping(sidecar, primary.host, primary.port, 700));
      await sleep(150);
    }
    assert.deepEqual([...answers].sort(), [false, true], 'answered and unanswered PINGs');
    t.diagnostic(`${sidecar.name}'s PINGs to the primary: answered, then not, then answered`);
  },
};

function linksOf(world: World): NonNullable<World['links']> {
  assert.ok(world.links !== undefined, 'a namespaces world');
  return world.links;
}

function party(world: World, name: string): Party {
  return linksOf(world).net.party(name);
}

function nodeOf(world: World, node: Party): TestRedis {
  const found = world.redis.nodes.find((candidate) => candidate.host === node.address);
  assert.ok(found !== undefined, `a Redis node at ${node.address}`);
  return found;
}

/** The fault's `count` cuts, once it has made them all (within 10 s of its start). */
async function cutsInForce(world: World, count: number): Promise<[Cut, ...Cut[]]> {
  const net = linksOf(world).net;
  await until(`the fault's ${count} cuts`, () => net.cuts().length >= count, 10_000);
  return net.cuts() as [Cut, ...Cut[]];
}

async function waitUntilHealed(world: World): Promise<void> {
  const net = linksOf(world).net;
  await until('the fault to heal', () => net.cuts().length === 0, 30_000);
}

/** Whether a redis-cli PING from `from`'s namespace is answered. */
async function ping(from: Party, host: string, port: number, timeoutMs = PING_TIMEOUT_MS): Promise<boolean> {
  const args = ['-h', host, '-p', String(port), '--no-auth-warning', 'PING'];
  return run(...prefixed(from.spawnPrefix, 'redis-cli', args), { timeout: timeoutMs }).then(
    ({ stdout }) => stdout.trim() === 'PONG',
    () => false,
  );
}

/** A Sentinel's flags for the primary (`master`, `s_down`, `o_down`, ...), asked from the runner. */
async function sentinelFlags(world: World, index: number): Promise<string> {
  const sentinel = world.redis.sentinels[index];
  assert.ok(sentinel !== undefined);
  const args = ['-h', sentinel.host, '-p', String(sentinel.port), 'SENTINEL', 'master', SENTINEL_MASTER];
  const { stdout } = await run('redis-cli', args, { timeout: 2_000 });
  const lines = stdout.split('\n');
  return lines[lines.indexOf('flags') + 1] ?? '';
}

/** Polls `condition` until it holds; throws after `ms` (by default about a cut's length) naming `what`. */
async function until(what: string, condition: () => boolean | Promise<boolean>, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (
    !(await Promise.resolve()
      .then(condition)
      .catch(() => false))
  ) {
    if (Date.now() > deadline) throw new Error(`not seen within ${ms} ms: ${what}`);
    await sleep(100);
  }
}
