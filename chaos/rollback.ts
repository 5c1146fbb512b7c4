// The nemesis's rollback: the primary restarted from an older snapshot of its own data, as a node restored from last
// night's backup, or one whose disk kept an RDB file while the writes after it were lost. The replicas follow it
// back (their offsets are ahead of its own: a full resynchronisation), so the whole set forgets the writes made
// since the snapshot: idempotency keys, postback inbox entries, the token record. Unlike a restart empty, the
// sidecar's store epoch comes back too, as it was when the snapshot was taken.
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FaultEvent } from './history.js';
import type { Recorder } from './recorder.js';
import { sleep, type World } from './world.js';
import type { TestRedis } from '../test/support/redis-server.js';
import { scratchDir } from '../test/support/scratch.js';

/** A key outside the sidecar's prefix, written just after the snapshot: gone afterwards means the data went back. */
const ROLLBACK_MARKER = 'chaos:rollback-marker';
const SNAPSHOT_BOUND_MS = 30_000;
const SETTLE_BOUND_MS = 60_000;

/**
 * At the fault's start a snapshot of the primary (BGSAVE, waited for, its dump.rdb copied aside); the fleet runs
 * on for `keepMs` (writes go on: the snapshot grows older than the data); then the primary is SIGKILLed, the
 * snapshot put back as its dump.rdb, and the node started again as a primary from it, well within the Sentinels'
 * down-after (1 s) as `redis-restart-empty` does. Recorded with whether the data was rolled back (the marker
 * written after the snapshot is gone from the primary the Sentinels name afterwards).
 */
export async function restartFromSnapshot(world: World, recorder: Recorder, keepMs: number): Promise<void> {
  const node = await world.primaryNode();
  const before = `${node.host}:${node.port}`;
  const start = recorder.now();
  let detail = `${before}`;
  const event: { rolled_back?: boolean } = {};
  try {
    const snapshot = await takeSnapshot(node);
    const keysAtSnapshot = await dbsize(node);
    await node.cli('SET', ROLLBACK_MARKER, String(recorder.now()));
    // On every replica too: a failover after all would keep it, and the fault then says no rollback happened. A
    // primary cut off from its replicas (a partition on at the same time) hands them nothing: whether the data went
    // back is then whether the Sentinels still name the node restarted from the snapshot.
    const [acked] = await node.cli('WAIT', String(world.redis.nodes.length - 1), '2000');
    const markerReplicated = Number(acked) > 0;
    detail += `: snapshot of ${keysAtSnapshot} keys, writes went on ${keepMs} ms`;
    await sleep(keepMs);
    const keysAtCrash = await dbsize(node);
    const crashAt = performance.now();
    await node.crash();
    copyFileSync(snapshot, join(node.dir, 'dump.rdb'));
    // A primary however it was first started: a node promoted by an earlier failover has --replicaof in its args.
    await node.start(['--replicaof', 'no', 'one']);
    const restartMs = Math.round(performance.now() - crashAt);
    const after = await world.redis.settled(SETTLE_BOUND_MS);
    const primary = await world.primaryNode();
    const [exists] = await primary.cli('EXISTS', ROLLBACK_MARKER);
    event.rolled_back = markerReplicated ? exists === '0' : after === before;
    detail +=
      ` (${keysAtCrash} keys at the crash), restarted from the snapshot in ${restartMs} ms, ` +
      `${after === before ? 'no failover' : `failed over to ${after}`}: ` +
      (event.rolled_back
        ? `the dataset rolled back (${await dbsize(primary)} keys)`
        : 'the newer data kept (no rollback)') +
      (markerReplicated ? '' : ' (cut off from its replicas: judged by the failover)');
  } finally {
    const fault: Omit<FaultEvent, 't'> = {
      type: 'fault',
      kind: 'redis-restart-snapshot',
      start,
      end: recorder.now(),
      detail,
      ...event,
    };
    recorder.record(fault);
  }
}

/** BGSAVE on `node`, waited for; returns a copy of the dump.rdb it wrote, kept aside in a scratch folder. */
async function takeSnapshot(node: TestRedis): Promise<string> {
  const saves = async (): Promise<{ count: number; inProgress: boolean; ok: boolean }> => {
    const info = await node.cli('INFO', 'persistence');
    const field = (name: string): string =>
      info
        .find((line) => line.startsWith(`${name}:`))
        ?.slice(name.length + 1)
        .trim() ?? '';
    return {
      count: Number(field('rdb_saves')),
      inProgress: field('rdb_bgsave_in_progress') === '1',
      ok: field('rdb_last_bgsave_status') === 'ok',
    };
  };
  const { count } = await saves();
  const deadline = performance.now() + SNAPSHOT_BOUND_MS;
  for (let asked = false; ;) {
    const now = await saves();
    if (now.count > count && !now.inProgress) {
      if (!now.ok) throw new Error(`BGSAVE on ${node.host}:${node.port} failed`);
      break;
    }
    // Another save in progress refuses a BGSAVE: asked again once it is done.
    if (!asked && !now.inProgress)
      asked = (await node.cli('BGSAVE').catch(() => []))[0]?.startsWith('Background saving') === true;
    if (performance.now() > deadline) throw new Error(`no snapshot of ${node.host}:${node.port} within 30 s`);
    await sleep(50);
  }
  const copy = join(scratchDir('chaos-snapshot-'), 'dump.rdb');
  copyFileSync(join(node.dir, 'dump.rdb'), copy);
  return copy;
}

async function dbsize(node: TestRedis): Promise<number> {
  return Number((await node.cli('DBSIZE'))[0] ?? NaN);
}
