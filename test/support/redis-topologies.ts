/**
 * Highly available Redis for tests, from real redis-server and redis-sentinel processes on 127.0.0.1 (or each in
 * a network namespace of its own: `places`):
 *
 *   const set = await startSentinelSet();   // a primary, one replica, three Sentinels watching them
 *   set.env                                  // the sidecar's settings for it (SIDECAR_REDIS_MODE=sentinel, ...)
 *   await set.primary.crash();               // SIGKILL the primary; set.failedOver() resolves on the new one
 *   await startSentinelSet({ downAfterMs: 10_000 })  // Sentinels slow to fail over: a restarted primary comes
 *                                            // back empty first, and its replica resynchronises to that
 *   await startSentinelSet({ places: { nodes: [p0, p1], sentinels: [s0, s1, s2] } })  // each node and Sentinel
 *                                            // at its own address, started with its prefix (netns.ts parties):
 *                                            // the Sentinels monitor and announce by those addresses
 *
 *   const cluster = await startCluster(3);   // three primaries covering the 16384 slots, no replicas
 *   await startCluster(3, 1)                 // the same, each primary with a replica (failover inside a shard)
 *   cluster.env                              // SIDECAR_REDIS_MODE=cluster, SIDECAR_REDIS_NODES=...
 *   await cluster.moveSlot(slot, toIndex)    // resharding: the slot's keys migrate to another primary
 *
 * Everything they start is stopped by close(), and by the process exit in any case (see redis-server.ts).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { RedisTopology } from '../../src/config/state-settings.js';
import { freeStablePort } from './free-port.js';
import { prefixed } from './netns.js';
import { startRedis, type RedisPlace, type TestRedis } from './redis-server.js';
import { scratchDir } from './scratch.js';

const run = promisify(execFile);

/** redis-cli against a Sentinel: its stdout lines. */
async function cliLines(sentinel: SentinelAddress, ...args: string[]): Promise<string[]> {
  const address = ['-h', sentinel.host, '-p', String(sentinel.port)];
  const { stdout } = await run('redis-cli', [...address, ...args], { timeout: 2_000 });
  return stdout.trim().split('\n');
}

export interface SentinelAddress {
  readonly host: string;
  readonly port: number;
}

export const SENTINEL_MASTER = 'sidecar-primary';

export interface SentinelSet {
  readonly primary: TestRedis;
  readonly replica: TestRedis;
  /** Every data node: the first primary, then its replicas (`replica` first). */
  readonly nodes: readonly TestRedis[];
  readonly sentinelPorts: readonly number[];
  /** Each Sentinel's address and port, in the order of `sentinelPorts`. */
  readonly sentinels: readonly SentinelAddress[];
  /** The set as a store's configuration has it (no credentials). */
  readonly topology: Extract<RedisTopology, { mode: 'sentinel' }>;
  readonly env: Readonly<Record<string, string>>;
  /** The primary as the Sentinels name it now (host:port). */
  currentPrimary(): Promise<string>;
  /** Resolves once the Sentinels name a primary other than `previous`. */
  failedOver(previous: string, timeoutMs: number): Promise<string>;
  /** Resolves, with the primary, once every Sentinel names the same one and it has its replica in sync. */
  settled(timeoutMs: number): Promise<string>;
  /**
   * Kills every Sentinel (SIGKILL) once they agree, and starts them again from their own config files, on the same
   * ports; resolves once they agree again. A Sentinel killed before it learned of the last failover would resume
   * from a stale file and could name the old primary for a while.
   */
  restartSentinels(): Promise<void>;
  /** Kills one Sentinel (SIGKILL), the others left running. */
  killSentinel(index: number): Promise<void>;
  close(): Promise<void>;
}

const sentinels = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of sentinels) child.kill('SIGKILL');
});

export interface SentinelOptions {
  /** How long the Sentinels wait before they call the primary down (`down-after-milliseconds`); 1 s by default. */
  readonly downAfterMs?: number;
  /** How many replicas the primary has (default 1). */
  readonly replicas?: number;
  /** More redis-server arguments for every node. */
  readonly args?: readonly string[];
  /**
   * Where each data node (the primary, then the replicas) and each of the three Sentinels runs; 127.0.0.1 and no
   * prefix for any not given.
   */
  readonly places?: { readonly nodes?: readonly RedisPlace[]; readonly sentinels?: readonly RedisPlace[] };
}

export async function startSentinelSet(options: SentinelOptions = {}): Promise<SentinelSet> {
  // No 5 s wait before a full sync (Redis 7's diskless default): a replica, or a restarted primary, syncs at once.
  const fastSync = ['--repl-diskless-sync-delay', '0', ...(options.args ?? [])];
  const nodePlace = (index: number): RedisPlace => options.places?.nodes?.[index] ?? {};
  const primary = await startRedis({ ...nodePlace(0), args: fastSync });
  const replicaArgs = [...fastSync, '--replicaof', primary.host, String(primary.port)];
  const replicas: TestRedis[] = [];
  for (let i = 0; i < (options.replicas ?? 1); i++)
    replicas.push(await startRedis({ ...nodePlace(i + 1), args: replicaArgs }));
  const [replica] = replicas as [TestRedis, ...TestRedis[]];
  const nodes = [primary, ...replicas];
  for (const node of replicas) {
    await until(
      async () => (await node.cli('INFO', 'replication')).some((l) => l.trim() === 'master_link_status:up'),
      15_000,
    );
  }
  const ports = await Promise.all([freeStablePort(), freeStablePort(), freeStablePort()]);
  const sentinelPlaces = ports.map((_, index) => options.places?.sentinels?.[index] ?? {});
  const sentinels = ports.map((port, index) => ({ host: sentinelPlaces[index]?.host ?? '127.0.0.1', port }));
  const files = await Promise.all(
    sentinels.map((sentinel) => sentinelConfig(sentinel, primary, options.downAfterMs ?? 1_000)),
  );
  const startSentinels = () =>
    Promise.all(files.map((file, index) => spawnSentinel(file, sentinelPlaces[index]?.netns ?? [])));
  let children = await startSentinels();
  const named = (sentinel: SentinelAddress) =>
    cliLines(sentinel, 'SENTINEL', 'get-master-addr-by-name', SENTINEL_MASTER);
  const ask = async (): Promise<string> => {
    for (const sentinel of sentinels) {
      const [host, p] = await named(sentinel).catch(() => []); // another Sentinel may answer
      if (host && p) return `${host}:${p}`;
    }
    throw new Error('no Sentinel answered');
  };
  const settled = async (timeoutMs: number): Promise<string> => {
    let agreed = '';
    await until(async () => {
      const names = new Set((await Promise.all(sentinels.map(named))).map((lines) => lines.join(':')));
      const [only] = names;
      const node = nodes.find((candidate) => only === `${candidate.host}:${candidate.port}`);
      if (names.size !== 1 || only === undefined || node === undefined) return false;
      const info = await node.cli('INFO', 'replication');
      const online = info.filter((line) => /^slave\d+:.*state=online/.test(line)).length;
      const inSync = info.some((line) => line.trim() === 'role:master') && online >= replicas.length;
      if (inSync) agreed = only;
      return inSync;
    }, timeoutMs);
    return agreed;
  };
  // The Sentinels know each other and the replica before a failover can be asked of them.
  const [first] = sentinels as [SentinelAddress, ...SentinelAddress[]];
  await until(async () => {
    const replicaList = await cliLines(first, 'SENTINEL', 'replicas', SENTINEL_MASTER);
    const peers = await cliLines(first, 'SENTINEL', 'sentinels', SENTINEL_MASTER);
    const known = replicas.every((node) => replicaList.includes(String(node.port)));
    return known && peers.filter((line) => line === 'name').length >= 2;
  }, 15_000);
  return {
    primary,
    replica,
    nodes,
    sentinelPorts: ports,
    sentinels,
    topology: {
      mode: 'sentinel',
      sentinels: sentinels.map(({ host, port }) => ({ host, port })),
      master: SENTINEL_MASTER,
      sentinelUsername: undefined,
      sentinelPassword: undefined,
      sentinelPasswordFile: undefined,
    },
    env: {
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_MODE: 'sentinel',
      SIDECAR_REDIS_SENTINELS: sentinels.map(({ host, port }) => `${host}:${port}`).join(','),
      SIDECAR_REDIS_SENTINEL_MASTER: SENTINEL_MASTER,
    },
    currentPrimary: ask,
    async failedOver(previous, timeoutMs) {
      let now = previous;
      await until(async () => (now = await ask()) !== previous, timeoutMs);
      return now;
    },
    settled,
    async restartSentinels() {
      await settled(30_000);
      await Promise.all(children.map((child) => stopChild(child)));
      // Each Sentinel rewrote its file with what it knows (the primary, the replica, its peers): it resumes from it.
      children = await startSentinels();
      await settled(30_000);
    },
    async killSentinel(index) {
      const child = children[index];
      if (child === undefined) throw new Error(`no Sentinel ${index} of ${children.length}`);
      await stopChild(child);
    },
    async close() {
      await Promise.all(children.map((child) => stopChild(child)));
      await Promise.all(nodes.map((node) => node.close()));
    },
  };
}

/**
 * A Sentinel's config: it declares the primary down after `downAfterMs` and fails over quickly (a test's patience).
 * It announces the address it binds, the one its peers and clients reach it at.
 */
async function sentinelConfig(sentinel: SentinelAddress, primary: TestRedis, downAfterMs: number): Promise<string> {
  const dir = scratchDir('sentinel-');
  const file = join(dir, 'sentinel.conf');
  await writeFile(
    file,
    [
      `port ${sentinel.port}`,
      `bind ${sentinel.host}`,
      `sentinel announce-ip ${sentinel.host}`,
      // Its peers and the replicas' clients come from other addresses when it is not on loopback.
      `protected-mode ${sentinel.host.startsWith('127.') ? 'yes' : 'no'}`,
      `dir ${dir}`,
      `sentinel monitor ${SENTINEL_MASTER} ${primary.host} ${primary.port} 2`,
      `sentinel down-after-milliseconds ${SENTINEL_MASTER} ${downAfterMs}`,
      `sentinel failover-timeout ${SENTINEL_MASTER} 5000`,
      `sentinel parallel-syncs ${SENTINEL_MASTER} 1`,
      '',
    ].join('\n'),
  );
  return file;
}

/** Starts redis-sentinel on `file` (after `prefix`, as redis-server is) and resolves once it monitors the primary. */
async function spawnSentinel(file: string, prefix: readonly string[]): Promise<ChildProcess> {
  const child = spawn(...prefixed(prefix, 'redis-sentinel', [file, '--logfile', '', '--daemonize', 'no']), {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  sentinels.add(child);
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-sentinel did not start:\n${output}`)), 10_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (!output.includes('+monitor master')) return;
      clearTimeout(timer);
      resolve();
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run redis-sentinel (apt-get install redis-sentinel): ${err.message}`));
    });
  });
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

async function stopChild(child: ChildProcess): Promise<void> {
  sentinels.delete(child);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

export interface TestCluster {
  readonly nodes: readonly TestRedis[];
  readonly env: Readonly<Record<string, string>>;
  /** Moves one hash slot, with its keys, to the node at `toIndex` (CLUSTER SETSLOT / MIGRATE, as resharding does). */
  moveSlot(slot: number, toIndex: number): Promise<void>;
  /** Which node (index) serves a slot now. */
  ownerOf(slot: number): Promise<number>;
  close(): Promise<void>;
}

export async function startCluster(primaries = 3, replicasEach = 0): Promise<TestCluster> {
  const nodes: TestRedis[] = [];
  const args = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--repl-diskless-sync-delay', '0'];
  // With replicas, a primary is failed over after 2 s instead of the default 15 s (a production's patience).
  // Without, the default stays: a loaded machine must not have a primary declared failed for a slow event loop.
  if (replicasEach > 0) args.push('--cluster-node-timeout', '2000');
  for (let i = 0; i < primaries * (1 + replicasEach); i++) {
    // The cluster bus listens on its own port, by default the node's port + 10000, which may be taken (it can fall in
    // the ephemeral range): a free one is given instead.
    nodes.push(await startRedis({ args: [...args, '--cluster-port', String(await freeStablePort())] }));
  }
  const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
  const create = ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicasEach), '--cluster-yes'];
  await run('redis-cli', create, { timeout: 20_000 });
  await until(async () => {
    const states = await Promise.all(nodes.map((node) => node.cli('CLUSTER', 'INFO')));
    return states.every((lines) => lines.some((line) => line.trim() === 'cluster_state:ok'));
  }, 15_000);
  // Each primary's replicas in sync, so that a write on any of them can be acknowledged from the start.
  await until(async () => {
    const roles = await Promise.all(nodes.map((node) => node.cli('INFO', 'replication')));
    const primaryRoles = roles.filter((lines) => lines.some((line) => line.trim() === 'role:master'));
    const synced = (lines: string[]) => lines.filter((line) => /^slave\d+:.*state=online/.test(line)).length;
    return primaryRoles.length === primaries && primaryRoles.every((lines) => synced(lines) >= replicasEach);
  }, 20_000);
  const idOf = async (node: TestRedis) => (await node.cli('CLUSTER', 'MYID'))[0] ?? '';
  const ownerOf = async (slot: number): Promise<number> => {
    // Any node that answers (one may be down: a failover test).
    const lines = await Promise.any(nodes.map((node) => node.cli('CLUSTER', 'SLOTS')));
    // redis-cli prints the nested reply flat: start, end, then the primary's ip, port, id, ...
    for (let i = 0; i + 3 < lines.length; i++) {
      const [start, end, , port] = [Number(lines[i]), Number(lines[i + 1]), lines[i + 2], Number(lines[i + 3])];
      if (
        Number.isInteger(start) &&
        Number.isInteger(end) &&
        start <= slot &&
        slot <= end &&
        lines[i + 2] === '127.0.0.1'
      ) {
        return nodes.findIndex((node) => node.port === port);
      }
    }
    throw new Error(`no owner for slot ${slot}`);
  };
  return {
    nodes,
    env: {
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_MODE: 'cluster',
      SIDECAR_REDIS_NODES: nodes.map((node) => `127.0.0.1:${node.port}`).join(','),
    },
    ownerOf,
    async moveSlot(slot, toIndex) {
      const from = nodes[await ownerOf(slot)]!;
      const to = nodes[toIndex]!;
      const [fromId, toId] = await Promise.all([idOf(from), idOf(to)]);
      await to.cli('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
      await from.cli('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
      for (;;) {
        const keys = await from.cli('CLUSTER', 'GETKEYSINSLOT', String(slot), '100');
        if (keys.length === 0) break;
        await from.cli('MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', ...keys);
      }
      for (const node of nodes) await node.cli('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    },
    async close() {
      await Promise.all(nodes.map((node) => node.close()));
    },
  };
}

/** Polls `check` every 100 ms until it is true, or throws after `timeoutMs`. */
async function until(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The node that serves `slot` once it is not `previous` (the cluster promoted a replica), within 30 s. */
export async function promotedOwner(ha: TestCluster, slot: number, previous: number): Promise<number> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const now = await ha.ownerOf(slot).catch(() => previous);
    if (now !== previous) return now;
    if (Date.now() > deadline) throw new Error('no replica was promoted within 30 s');
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
