import { createHash } from 'node:crypto';
import { createClient, createCluster, createSentinel, ErrorReply } from '@redis/client';
import type { RedisNode, RedisTopology } from '../config/state-settings.js';
import { trustedCas } from '../upstream/trusted-cas.js';

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

/** The commands a write is made of: on a link (routed by its keys), or on one connection held for its WAIT. */
export interface WriteTarget {
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>;
  /** A script over `keys` (one slot: the account's hash tag). */
  evalSha(sha1: string, keys: string[], args: string[]): Promise<unknown>;
  eval(source: string, keys: string[], args: string[]): Promise<unknown>;
}

/**
 * One physical connection, held from a write to its WAIT. WAIT counts only the writes made on the connection it
 * runs on: node-redis reconnects by itself, and a WAIT sent after a reconnect runs on a fresh connection that made
 * no write, so it answers at once with every replica and would confirm a write it never saw. Writes and WAIT go on
 * this one connection, and `replaced` says when it is no longer the one it was when held.
 */
export interface HeldConnection extends WriteTarget {
  /**
   * Lost or reconnected since it was held (node-redis' socket epoch moved, or the client is gone: a failover gave
   * the primary a client of its own). A WAIT answered then may not have counted the write.
   */
  readonly replaced: boolean;
  /**
   * WAIT on this connection: how many replicas hold the writes it made before this call. Queued right behind a write,
   * before that write's reply, it counts the write and both take one round trip.
   */
  wait(replicas: number, timeoutMs: number): Promise<number>;
  /**
   * A command went out after the last WAIT was queued, or on another node's connection (a redirected write): that
   * WAIT does not count it. A script's EVAL after NOSCRIPT, or a retry after TRYAGAIN, goes after a pipelined WAIT.
   */
  readonly sentSinceWait: boolean;
  /**
   * This connection's Redis ran the script `sha1` since it connected: its next EVALSHA there will not come back
   * NOSCRIPT (short of a SCRIPT FLUSH), so a WAIT may be queued behind it.
   */
  hasScript(sha1: string): boolean;
}

/**
 * One way to Redis, whatever the topology: the commands the store sends, and the connection's state. node-redis
 * does the discovery, the redirections (MOVED, ASK) and the reconnections; this is only the seam the store sees.
 */
export interface RedisLink extends WriteTarget {
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
  publish(channel: string, message: string): Promise<unknown>;
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  /**
   * Any other command on `key`, with its RESP2 reply as Redis sends it (arrays of strings): the postback inbox's
   * stream and sorted-set commands, whose parsed replies differ between versions. In a cluster node-redis routes a
   * command by its own routing tips: one that names `key` goes to the key's node, a keyless one (PING, CLIENT ...)
   * wherever its tips say, whatever `key` is given; only commands on `key` belong here.
   */
  command(key: string, args: readonly string[]): Promise<unknown>;
  /**
   * The connection that writes to `key` go on now (the primary's; in a cluster, the key's node's), held for an
   * acknowledged write and its WAIT.
   */
  hold(key: string): Promise<HeldConnection>;
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
  const ca = trustedCas(options.ca);
  return { ...common, tls: true as const, ...(ca !== undefined ? { ca } : {}) };
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

/** What a held connection needs of a node-redis client: raw commands, and which socket they go on. */
interface NodeClient {
  readonly isReady: boolean;
  /** Counts the client's connections made ready: it moves at every reconnect. */
  readonly socketEpoch: number;
  sendCommand(args: string[]): Promise<unknown>;
}

/**
 * Where a write refused with MOVED or ASK (nothing written) is to go: the node's client, and whether each command
 * there must follow ASKING (the slot is still migrating to it). Undefined: not a redirection, or a node unknown.
 */
type Redirect = (err: unknown) => Promise<{ readonly client: NodeClient; readonly asking: boolean } | undefined>;

/**
 * Scripts each client's Redis ran (EVALSHA or EVAL), as of one connection: Redis keeps its script cache while it runs,
 * so a new connection (a restart, a failover) starts knowing none.
 */
const loadedScripts = new WeakMap<NodeClient, { readonly epoch: number; readonly sha1s: Set<string> }>();

function scriptsOf(client: NodeClient): Set<string> {
  const known = loadedScripts.get(client);
  if (known?.epoch === client.socketEpoch) return known.sha1s;
  const fresh = { epoch: client.socketEpoch, sha1s: new Set<string>() };
  loadedScripts.set(client, fresh);
  return fresh.sha1s;
}

/**
 * `client`'s current connection, held. Raw commands (replies as Redis sends them, as the link's own). A command
 * queued on a connection that drops is rejected, never sent again on the next one (no offline queue): a reply that
 * came while the epoch is still the one held came on the held connection. In a cluster, a write redirected (MOVED,
 * ASK) was not made where it was sent: the connection held becomes the one of the node named, once, before anything
 * was written, and the write's WAIT goes there too (`sentSinceWait`: one queued on the first node counts nothing).
 */
function heldConnection(client: NodeClient, redirect?: Redirect): HeldConnection {
  let held = { client, epoch: client.socketEpoch, asking: false };
  let redirected = false;
  let sent = 0;
  let waited: { readonly client: NodeClient; readonly sent: number } | undefined;
  const sendOnHeld = async (args: string[]): Promise<unknown> => {
    sent++;
    if (!held.asking) return held.client.sendCommand(args);
    // Queued together, so that no other command of the client comes between ASKING and the one it is for.
    const [, reply] = await Promise.all([held.client.sendCommand(['ASKING']), held.client.sendCommand(args)]);
    return reply;
  };
  const write = async (args: string[]): Promise<unknown> => {
    try {
      return await sendOnHeld(args);
    } catch (err) {
      const to = redirected || redirect === undefined ? undefined : await redirect(err);
      if (to === undefined) throw err;
      redirected = true;
      held = { client: to.client, epoch: to.client.socketEpoch, asking: to.asking };
      return sendOnHeld(args);
    }
  };
  const script = (command: string, body: string, keys: string[], args: string[]) =>
    write([command, body, String(keys.length), ...keys, ...args]);
  /**
   * `reply`, unchanged; once it comes, the script is known to the node it ran on. Beside the reply, not in its chain:
   * a caller's fallback to EVAL after NOSCRIPT is queued as soon as it would be without.
   */
  const ran = (sha1: string, reply: Promise<unknown>): Promise<unknown> => {
    const on = held.client;
    reply.then(() => on === held.client && scriptsOf(on).add(sha1)).catch(() => undefined);
    return reply;
  };
  return {
    get replaced() {
      return !held.client.isReady || held.client.socketEpoch !== held.epoch;
    },
    setIfAbsent: async (key, value, ttlMs) => (await write(['SET', key, value, 'NX', 'PX', String(ttlMs)])) === 'OK',
    evalSha: (sha1, keys, args) => ran(sha1, script('EVALSHA', sha1, keys, args)),
    eval: (source, keys, args) =>
      ran(createHash('sha1').update(source).digest('hex'), script('EVAL', source, keys, args)),
    hasScript: (sha1) => scriptsOf(held.client).has(sha1),
    get sentSinceWait() {
      return waited === undefined || waited.client !== held.client || waited.sent !== sent;
    },
    wait: async (replicas, timeoutMs) => {
      waited = { client: held.client, sent };
      return Number(await held.client.sendCommand(['WAIT', String(replicas), String(timeoutMs)]));
    },
  };
}

function standaloneLink(options: RedisConnectionOptions, url: string): RedisLink {
  // The URL's scheme says whether it is TLS.
  const node = dataNodeOptions({ ...options, tls: url.startsWith('rediss:') });
  const client = createClient({ url, RESP: 2, maintNotifications: 'disabled', ...node });
  // A client destroyed while its socket is being opened still connects (node-redis checks for no destroy between the
  // two) and then stays connected, reconnecting for as long as the process lives: destroyed again once it connects.
  let destroyed = false;
  client.on('connect', () => {
    if (destroyed) client.destroy();
  });
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
    destroy: () => {
      destroyed = true;
      client.destroy();
    },
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
    hold: () => Promise.resolve(heldConnection(client)),
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
  return sentinelView(new SharedSentinel(options, topology));
}

function newSentinel(options: RedisConnectionOptions, topology: Extract<RedisTopology, { mode: 'sentinel' }>) {
  const node = dataNodeOptions(options);
  return createSentinel({
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
}

/**
 * One node-redis Sentinel client, shared by a link and its duplicates. Its pub/sub already runs on a connection of
 * its own, so a duplicate (the store's subscriber) needs no second client: and each client node-redis makes, for a
 * Sentinel it asks or a primary it connects to, builds its command classes anew (800-odd methods, 25-180 ms of the
 * event loop on 2 cores; docs/performance.md), at start and at every failover, once per Sentinel client.
 */
class SharedSentinel {
  readonly client: ReturnType<typeof newSentinel>;
  private readonly first = new FirstConnection();
  private readonly errorListeners: Array<(err: unknown) => void> = [];
  private connecting: Promise<void> | undefined;
  private links = 0;

  constructor(options: RedisConnectionOptions, topology: Extract<RedisTopology, { mode: 'sentinel' }>) {
    const client = newSentinel(options, topology);
    this.client = client;
    const errors = new SentinelErrors(topology.sentinels.length);
    client.on('ready', () => errors.connected());
    // One judge for every link of the client: it counts each error once.
    client.on('error', (err: unknown) => {
      if (errors.isTheLinks(err, client.isReady)) for (const listener of this.errorListeners) listener(err);
    });
  }

  join(): void {
    this.links++;
  }

  onError(listener: (err: unknown) => void): void {
    this.errorListeners.push(listener);
  }

  /** The first connection, made once whichever link asks first. */
  connect(): Promise<void> {
    this.connecting ??= this.first.run(() => this.client.connect());
    return this.connecting;
  }

  /** A link is done with the client: it is destroyed with the last one. */
  leave(): void {
    if (--this.links > 0) return;
    this.first.stop();
    void this.client.destroy().catch(() => undefined);
  }
}

/** One link on a shared Sentinel client. */
function sentinelView(shared: SharedSentinel): RedisLink {
  const { client: sentinel } = shared;
  shared.join();
  let left = false;
  return {
    get isOpen() {
      return sentinel.isOpen;
    },
    get isReady() {
      return sentinel.isReady;
    },
    onError: (listener) => shared.onError(listener),
    onReady: (listener) => void sentinel.on('ready', listener),
    connect: () => shared.connect(),
    destroy: () => {
      if (left) return;
      left = true;
      shared.leave();
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
    // The primary's client as node-redis has it now (after a failover, a new client): _execute is the only way to
    // it; a lease of it (acquire) would take it from every other command of this link until released.
    hold: async () => heldConnection(await sentinel._execute(false, (client) => Promise.resolve(client))),
    view: () => roleView((args) => sentinel.sendCommand(false, args), address(sentinel.getMasterNode())),
    // Pub/sub has its connection within the client already (see SharedSentinel).
    duplicate: () => sentinelView(shared),
  };
}

/**
 * Cluster mode: node-redis learns the slots from the seeds, sends each command to the node of its key (every key of
 * an account shares one hash tag, so one node), follows MOVED and ASK, and rediscovers the slots after a failover.
 * PING is routed by the account's key too; an acknowledged write and its WAIT go on the key's node's connection.
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
  // node-redis's destroy() leaves clients behind that reconnect for as long as the process lives: a node's client
  // destroyed while its socket is being opened still connects (as a standalone one does, above), and a slot discovery
  // already under way (the first connection's, or one after a failover) connects to every node it found once its
  // CLUSTER SLOTS answers, after the destroy. So the link keeps every node client it has seen since its destroy (the
  // cluster's destroy() forgets them) and destroys them all again whenever one connects or retries.
  let destroyed = false;
  const doomed = new Set<{ destroy(): void }>();
  const destroyNodeClients = (): void => {
    for (const node of cluster.masters) if (node.client !== undefined) doomed.add(node.client);
    for (const client of doomed) client.destroy();
  };
  for (const event of ['node-connect', 'node-reconnecting'] as const)
    cluster.on(event, () => destroyed && destroyNodeClients());
  // A held connection's write answered MOVED or ASK (`<kind> <slot> <host:port>`): that node's client. After a MOVED,
  // a read routed by the key lets the cluster follow it too and learn the slot's new node for the next writes.
  const redirect =
    (key: string): Redirect =>
    async (err) => {
      if (!(err instanceof ErrorReply)) return undefined;
      const [kind, , address] = err.message.split(' ');
      if ((kind !== 'MOVED' && kind !== 'ASK') || address === undefined) return undefined;
      if (kind === 'MOVED') void cluster.get(key).catch(() => null);
      const named = cluster.nodeByAddress.get(address);
      return named === undefined ? undefined : { client: await cluster.nodeClient(named), asking: kind === 'ASK' };
    };
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
      destroyed = true;
      destroyNodeClients();
      cluster.destroy();
    },
    // On the key's node's client: through the cluster, node-redis sends a PING to every primary (its command tips
    // say all_shards) and fails it when one does not answer, whatever the routing key.
    ping: async (routingKey) => (await cluster.getNodeClientForKey(routingKey, false)).sendCommand(['PING']),
    get: (key) => cluster.get(key),
    setIfAbsent: async (key, value, ttlMs) =>
      (await cluster.set(key, value, { condition: 'NX', expiration: { type: 'PX', value: ttlMs } })) === 'OK',
    evalSha: (sha1, keys, args) => cluster.evalSha(sha1, { keys, arguments: args }),
    eval: (source, keys, args) => cluster.eval(source, { keys, arguments: args }),
    publish: (channel, message) => cluster.publish(channel, message),
    subscribe: (channel, listener) => cluster.subscribe(channel, listener),
    unsubscribe: (channel, listener) => cluster.unsubscribe(channel, listener as (message: string | Buffer) => void),
    command: (key, args) => cluster.sendCommand(key, false, [...args]),
    // The key's node's client, the write and its WAIT sent on it (through the cluster, WAIT would go to every primary
    // and answer the lowest count).
    hold: async (key) => heldConnection(await cluster.getNodeClientForKey(key, false), redirect(key)),
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
 * Which of a Sentinel client's `error` events are the link's own. node-redis finds the primary by asking each Sentinel
 * in turn, and reports each one that fails: as text from its connection (`obseve client error: ...`), then as the
 * Error of that attempt; it goes round again a second later when none answered, or the primary they named could not
 * be reached. Until it first connects, the link has failed once every Sentinel has failed in one round (one Error
 * each): one Sentinel down while another answers is no failure, however many rounds node-redis makes, and a replica
 * starting then waits for the fleet's token instead of logging in alone. A round is told from the next by the
 * addresses the errors name (a refused or unreachable Sentinel's error carries it): a Sentinel failing again starts a
 * new round. An error without an address (node-redis's own connect timeout) counts as one more Sentinel. Once
 * connected, an error while ready is one Sentinel's (the one it listens to for failovers, or one it asks while looking
 * for another): node-redis asks another and the primary's connection goes on serving, so the commands judge the
 * store. While it moves to a new primary (not ready), every error is the link's.
 *
 * An error of the pub/sub connection while ready is dropped with the Sentinels' (node-redis reports both alike): it
 * reconnects and subscribes again by itself, and the fleet's record is read every 10 s whatever was announced
 * meanwhile.
 */
export class SentinelErrors {
  private everConnected = false;
  /** The addresses that failed in node-redis's current round of asking the Sentinels. */
  private readonly failedThisRound = new Set<string>();
  /** Errors of this round that name no address. */
  private unnamedThisRound = 0;

  constructor(private readonly sentinels: number) {}

  connected(): void {
    this.everConnected = true;
  }

  isTheLinks(err: unknown, ready: boolean): boolean {
    if (ready) return false;
    if (this.everConnected) return true;
    if (!(err instanceof Error)) return false;
    const address = errorAddress(err);
    if (address === undefined) this.unnamedThisRound++;
    else {
      if (this.failedThisRound.has(address)) {
        this.failedThisRound.clear();
        this.unnamedThisRound = 0;
      }
      this.failedThisRound.add(address);
    }
    return this.failedThisRound.size + this.unnamedThisRound >= this.sentinels;
  }
}

/** The `host:port` a connection error names (Node's system errors carry them), if any. */
function errorAddress(err: Error): string | undefined {
  const { address, port } = err as Error & { address?: unknown; port?: unknown };
  return typeof address === 'string' && typeof port === 'number' ? `${address}:${port}` : undefined;
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
