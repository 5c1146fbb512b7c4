import { rootCertificates } from 'node:tls';
import { createClient, createCluster, createSentinel } from '@redis/client';
import type { RedisNode, RedisTopology } from '../config/state-settings.js';

/** How long one connection attempt (TCP, TLS, AUTH, SELECT) may take before it counts as failed and is retried. */
export const REDIS_CONNECT_TIMEOUT_MS = 2_000;
/** Reconnect backoff: 100 ms doubling up to this cap (plus jitter), forever: Redis coming back is always noticed. */
export const REDIS_RECONNECT_MAX_MS = 1_000;
/** Commands waiting for a stalled Redis: past this, new ones fail at once instead of piling up in memory. */
const MAX_QUEUED_COMMANDS = 10_000;

export interface RedisConnectionOptions {
  /** How to find Redis. */
  readonly topology: RedisTopology;
  /** Sentinel and cluster modes: TLS to every node (in standalone mode the URL's scheme says it). */
  readonly tls?: boolean;
  readonly username?: string | undefined;
  /**
   * The password, or where to get it at each connection attempt (open-store.ts reads the password file again, so a
   * rotated password is used by the next connection; connections already logged in stay so).
   */
  readonly password?: string | (() => Promise<string>) | undefined;
  /** The Sentinels' own password, likewise (Sentinel mode). */
  readonly sentinelPassword?: string | (() => Promise<string>) | undefined;
  /** PEM of an extra CA for TLS, trusted besides the usual roots (a private CA, a cluster-internal Redis). */
  readonly ca?: string | undefined;
}

/** What a topology knows of itself: `check` prints it, and `auto` replica acknowledgement reads it. */
export interface TopologyView {
  readonly primary: string | undefined;
  readonly replicas: number;
  /** Cluster mode: hash slots with a primary, of 16384. */
  readonly slotsCovered?: number;
  readonly primaries?: number;
}

/**
 * One way to Redis, whatever the topology: the commands the store sends, and the connection's state. node-redis
 * does the discovery, the redirections (MOVED, ASK) and the reconnections; this is only the seam the store sees.
 */
export interface RedisLink {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  /** Every failed connection attempt or connection error (node-redis throws an error nobody listens to). */
  onError(listener: (err: unknown) => void): void;
  /** (Re)connected and ready for commands. */
  onReady(listener: () => void): void;
  /** Starts connecting, and keeps trying in the background; resolves once connected or closed. */
  connect(): Promise<void>;
  destroy(): void;
  ping(routingKey: string): Promise<unknown>;
  get(key: string): Promise<string | null>;
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>;
  /** A script over `keys` (one slot: the account's hash tag), routed by the first. */
  evalSha(sha1: string, keys: string[], args: string[]): Promise<unknown>;
  eval(source: string, keys: string[], args: string[]): Promise<unknown>;
  publish(channel: string, message: string): Promise<unknown>;
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  /**
   * Any other command, routed by `key` (its node in a cluster), with its RESP2 reply as Redis sends it (arrays of
   * strings): the postback inbox's stream and sorted-set commands, whose parsed replies differ between versions.
   */
  command(key: string, args: readonly string[]): Promise<unknown>;
  /** WAIT on the connection that wrote `key` (the key's node in a cluster): how many replicas have its writes. */
  wait(key: string, replicas: number, timeoutMs: number): Promise<number>;
  /** The primary and replicas as the client knows them; `routingKey` reaches the account's node. */
  view(routingKey: string): Promise<TopologyView>;
  /** A second link to the same Redis (pub/sub takes a connection of its own). */
  duplicate(): RedisLink;
}

function reconnectDelay(retries: number): number {
  return Math.min(100 * 2 ** retries, REDIS_RECONNECT_MAX_MS) + Math.floor(Math.random() * 100);
}

/** AUTH at every connection attempt (RESP2: `AUTH [username] password`), with the password as of that moment. */
function credentials(username: string | undefined, password: RedisConnectionOptions['password']) {
  if (password === undefined) return {};
  const current = typeof password === 'function' ? password : () => Promise.resolve(password);
  const credentialsProvider = {
    type: 'async-credentials-provider' as const,
    credentials: async () => ({ ...(username !== undefined ? { username } : {}), password: await current() }),
  };
  return { credentialsProvider };
}

function socketOptions(options: RedisConnectionOptions) {
  const common = { connectTimeout: REDIS_CONNECT_TIMEOUT_MS, reconnectStrategy: reconnectDelay };
  if (options.tls !== true) return { ...common, tls: false as const };
  return {
    ...common,
    tls: true as const,
    ...(options.ca !== undefined ? { ca: [...rootCertificates, options.ca] } : {}),
  };
}

/**
 * Every connection to a data node as the store needs it, whatever the topology: no offline queue (a command while
 * disconnected fails at once: an outage must fail fast, never queue), a bounded queue, capped reconnect backoff, no
 * CLIENT SETINFO (one command less for the ACL rules to allow). Each topology also asks for RESP2 (any Redis from 5
 * on, and every managed offering).
 */
function dataNodeOptions(options: RedisConnectionOptions) {
  return {
    socket: socketOptions(options),
    disableOfflineQueue: true,
    commandsQueueMaxLength: MAX_QUEUED_COMMANDS,
    disableClientInfo: true,
    ...credentials(options.username, options.password),
  };
}

/** The link the topology asks for. Not connected yet: the caller attaches its listeners first. */
export function createRedisLink(options: RedisConnectionOptions): RedisLink {
  const { topology } = options;
  if (topology.mode === 'sentinel') return sentinelLink(options, topology);
  if (topology.mode === 'cluster') return clusterLink(options, topology.nodes);
  return standaloneLink(options, topology.url);
}

const address = (node: RedisNode | undefined) => (node === undefined ? undefined : `${node.host}:${node.port}`);

/** ROLE on a primary: `master`, its offset, and one entry per connected replica. */
async function roleView(
  send: (args: string[]) => Promise<unknown>,
  primary: string | undefined,
): Promise<TopologyView> {
  const role = (await send(['ROLE'])) as [string, number, unknown[]];
  return { primary, replicas: role[0] === 'master' && Array.isArray(role[2]) ? role[2].length : 0 };
}

function standaloneLink(options: RedisConnectionOptions, url: string): RedisLink {
  // The URL's scheme says whether it is TLS.
  const node = dataNodeOptions({ ...options, tls: url.startsWith('rediss:') });
  const client = createClient({ url, RESP: 2, maintNotifications: 'disabled', ...node });
  return {
    get isOpen() {
      return client.isOpen;
    },
    get isReady() {
      return client.isReady;
    },
    onError: (listener) => void client.on('error', listener),
    onReady: (listener) => void client.on('ready', listener),
    connect: async () => {
      // Rejects only when closed while connecting; failures before that were `error` events.
      await client.connect().catch(() => undefined);
    },
    destroy: () => client.destroy(),
    ping: () => client.ping(),
    get: (key) => client.get(key),
    setIfAbsent: async (key, value, ttlMs) =>
      (await client.set(key, value, { condition: 'NX', expiration: { type: 'PX', value: ttlMs } })) === 'OK',
    evalSha: (sha1, keys, args) => client.evalSha(sha1, { keys, arguments: args }),
    eval: (source, keys, args) => client.eval(source, { keys, arguments: args }),
    publish: (channel, message) => client.publish(channel, message),
    subscribe: (channel, listener) => client.subscribe(channel, listener),
    unsubscribe: (channel, listener) => client.unsubscribe(channel, listener),
    command: (_key, args) => client.sendCommand([...args]),
    wait: (_key, replicas, timeoutMs) => client.wait(replicas, timeoutMs),
    view: () => roleView((args) => client.sendCommand(args), new URL(url).host),
    duplicate: () => standaloneLink(options, url),
  };
}

/**
 * Sentinel mode: node-redis asks the Sentinels for the primary, follows a failover (the Sentinels' `+switch-master`)
 * and reconnects to the new primary by itself. One connection to the primary (masterPoolSize 1): WAIT then counts
 * the writes this replica made on it, and no command is read from a replica (replicaPoolSize 0).
 */
function sentinelLink(
  options: RedisConnectionOptions,
  topology: Extract<RedisTopology, { mode: 'sentinel' }>,
): RedisLink {
  const node = dataNodeOptions(options);
  const first = new FirstConnection();
  const sentinel = createSentinel({
    name: topology.master,
    sentinelRootNodes: topology.sentinels.map((entry) => ({ host: entry.host, port: entry.port })),
    RESP: 2,
    masterPoolSize: 1,
    replicaPoolSize: 0,
    nodeClientOptions: node,
    sentinelClientOptions: {
      socket: node.socket,
      disableClientInfo: true,
      ...credentials(topology.sentinelUsername, options.sentinelPassword),
    },
  });
  return {
    get isOpen() {
      return sentinel.isOpen;
    },
    get isReady() {
      return sentinel.isReady;
    },
    onError: (listener) => void sentinel.on('error', listener),
    onReady: (listener) => void sentinel.on('ready', listener),
    connect: () => first.run(() => sentinel.connect()),
    destroy: () => {
      first.stop();
      void sentinel.destroy().catch(() => undefined);
    },
    ping: () => sentinel.ping(),
    get: (key) => sentinel.get(key),
    setIfAbsent: async (key, value, ttlMs) =>
      (await sentinel.set(key, value, { condition: 'NX', expiration: { type: 'PX', value: ttlMs } })) === 'OK',
    evalSha: (sha1, keys, args) => sentinel.evalSha(sha1, { keys, arguments: args }),
    eval: (source, keys, args) => sentinel.eval(source, { keys, arguments: args }),
    publish: (channel, message) => sentinel.publish(channel, message),
    subscribe: (channel, listener) => sentinel.subscribe(channel, listener),
    // Registered as a string listener (no buffer mode): the same function, as the client types any listener.
    unsubscribe: (channel, listener) => sentinel.unsubscribe(channel, listener as (message: string | Buffer) => void),
    command: (_key, args) => sentinel.sendCommand(false, [...args]),
    wait: (_key, replicas, timeoutMs) => sentinel.wait(replicas, timeoutMs),
    view: () => roleView((args) => sentinel.sendCommand(false, args), address(sentinel.getMasterNode())),
    duplicate: () => sentinelLink(options, topology),
  };
}

/**
 * Cluster mode: node-redis learns the slots from the seeds, sends each command to the node of its key (every key of
 * an account shares one hash tag, so one node), follows MOVED and ASK, and rediscovers the slots after a failover.
 * WAIT and PING are routed by the account's key too, so WAIT runs on the connection that made the writes.
 */
function clusterLink(options: RedisConnectionOptions, nodes: readonly RedisNode[]): RedisLink {
  const scheme = options.tls === true ? 'rediss' : 'redis';
  const node = dataNodeOptions(options);
  const first = new FirstConnection();
  const cluster = createCluster({
    rootNodes: nodes.map((entry) => ({ url: `${scheme}://${entry.host}:${entry.port}` })),
    defaults: node,
    RESP: 2,
    useReplicas: false,
  });
  return {
    get isOpen() {
      return cluster.isOpen;
    },
    get isReady() {
      return cluster.isReady;
    },
    onError: (listener) => {
      cluster.on('error', listener);
      cluster.on('node-error', listener);
    },
    onReady: (listener) => {
      cluster.on('connect', listener);
      cluster.on('node-ready', listener);
    },
    connect: () => first.run(() => cluster.connect()),
    destroy: () => {
      first.stop();
      if (cluster.isOpen) cluster.destroy();
    },
    ping: (routingKey) => cluster.sendCommand(routingKey, true, ['PING']),
    get: (key) => cluster.get(key),
    setIfAbsent: async (key, value, ttlMs) =>
      (await cluster.set(key, value, { condition: 'NX', expiration: { type: 'PX', value: ttlMs } })) === 'OK',
    evalSha: (sha1, keys, args) => cluster.evalSha(sha1, { keys, arguments: args }),
    eval: (source, keys, args) => cluster.eval(source, { keys, arguments: args }),
    publish: (channel, message) => cluster.publish(channel, message),
    subscribe: (channel, listener) => cluster.subscribe(channel, listener),
    unsubscribe: (channel, listener) => cluster.unsubscribe(channel, listener as (message: string | Buffer) => void),
    command: (key, args) => cluster.sendCommand(key, false, [...args]),
    wait: async (key, replicas, timeoutMs) =>
      Number(await cluster.sendCommand(key, false, ['WAIT', String(replicas), String(timeoutMs)])),
    view: () =>
      Promise.resolve({
        primary: undefined,
        replicas: cluster.replicas.length,
        slotsCovered: cluster.slots.filter((shard) => shard?.master !== undefined).length,
        primaries: cluster.masters.length,
      }),
    duplicate: () => clusterLink(options, nodes),
  };
}

/**
 * Sentinel and cluster clients reject connect() when no seed answers at start, where a standalone client keeps
 * retrying by itself: here the first connection is retried with the same capped backoff until it succeeds or the
 * link is destroyed, so a sidecar whose Redis is down starts, and connects when Redis comes.
 */
class FirstConnection {
  private destroyed = false;

  async run(connect: () => Promise<unknown>): Promise<void> {
    for (let failures = 0; !this.destroyed; failures++) {
      try {
        await connect();
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, reconnectDelay(failures)).unref());
      }
    }
  }

  stop(): void {
    this.destroyed = true;
  }
}
