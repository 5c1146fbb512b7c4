import type { KeyObject } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ErrorReply } from '@redis/client';
import type { Logger } from '../observability/log.js';
import type { StateStoreCommand, StateStoreOutcome } from '../observability/state-store-metrics.js';
import { ACKNOWLEDGED_WRITE_CONNECTIONS, LinkPool, PoolNotConnected } from './link-pool.js';
import {
  createRedisLink,
  type HeldConnection,
  type RedisConnectionOptions,
  type RedisLink,
  type TopologyView,
  type WriteTarget,
} from './redis-client.js';
import { ConnectionReplaced, describeRedisError, RedisCommandTimeout, ReplicasBehind } from './redis-errors.js';
import { DEFAULT_REDIS_KEY_PREFIX, RedisKeys } from './redis-keys.js';
import { NO_RECORD_MAC, RecordMac, type OpenedRecord, type RecordRejected } from './record-mac.js';
import {
  COMPARE_AND_DELETE,
  COMPARE_AND_SET,
  DELETE_EXACT,
  SET_IF_ABSENT_BOUNDED,
  WRITE_IF,
  type RedisScript,
  type ScriptCall,
  type ScriptInput,
} from './redis-scripts.js';
import { StoreAvailability } from './store-availability.js';
import {
  StateStoreUnavailableError,
  type Condition,
  type ReadRecord,
  type StateStore,
  type Write,
  type WriteOptions,
} from './state-store.js';

/** SIDECAR_REDIS_COMMAND_TIMEOUT_MS's default: the longest a request ever waits on Redis. */
export const DEFAULT_REDIS_COMMAND_TIMEOUT_MS = 100;
/** Between two tries of a multi-key script refused with TRYAGAIN (a Cluster slot migration in progress). */
const TRYAGAIN_PAUSE_MS = 5;
/** While down but connected (commands timing out or refused), how often a PING checks whether Redis is back. */
const PROBE_INTERVAL_MS = 500;
/** Failed acknowledged writes whose link a later delete of the same key is sent on (compareAndDelete). */
const MAX_UNCERTAIN_WRITES = 1_000;
/** Refused records remembered so that each is reported once (the oldest forgotten first). */
const MAX_REFUSED_REMEMBERED = 1_000;
/** The store's own links (commands, pub/sub), or one of the acknowledged writes' connections. */
type LinkRole = 'shared' | 'acknowledging';

export interface RedisStoreOptions extends RedisConnectionOptions {
  /** Short name of the vendor account (accountTag(base URL, username)): the hash tag of every key. */
  readonly accountTag: string;
  readonly keyPrefix?: string;
  readonly commandTimeoutMs?: number;
  /**
   * Replicas that must hold an acknowledged write (WAIT) before it counts; 0 or absent: none; `auto` (cluster mode):
   * 1 when the cluster's primaries have replicas, else 0.
   */
  readonly minReplicasAcked?: number | 'auto';
  readonly log?: Logger;
  /** Every command's duration and outcome (the store command histogram). */
  readonly onCommand?: (command: StateStoreCommand, outcome: StateStoreOutcome, seconds: number) => void;
  /**
   * SIDECAR_STATE_MAC_KEY_FILE: every value is sealed with a MAC on the way in and checked on the way out
   * (record-mac.ts). Absent: values are stored as they are.
   */
  readonly recordMac?: {
    /** Newest first: the first signs, every one verifies. */
    readonly keys: readonly KeyObject[];
    readonly acceptUnsigned: boolean;
    /** Each record refused: counted and logged by the caller, never its content. */
    readonly onRejected: (rejected: RecordRejected) => void;
  };
  /** Makes the store's links (default createRedisLink): tests wrap it to act on one connection the store holds. */
  readonly createLink?: (options: RedisConnectionOptions) => RedisLink;
}

/** One entry of a stream: its id (`<ms>-<seq>`) and its fields. */
export interface StreamEntry {
  readonly id: string;
  readonly fields: Readonly<Record<string, string>>;
}

interface Channel {
  readonly listeners: Set<(message: string) => void>;
  readonly dispatch: (message: string) => void;
}

/**
 * The fleet's store on Redis (node-redis). It connects in the background and never throws at start: a sidecar
 * whose Redis is down starts, serves, and reports the store unavailable until Redis answers. Every command is
 * bounded by the command timeout and fails with StateStoreUnavailableError; commands are never queued while
 * disconnected. Pub/sub runs on a second connection (a subscribed connection takes no other command), which
 * node-redis subscribes again after every reconnect. With replica acknowledgement configured, acknowledged writes
 * run on connections of their own (link-pool.ts), so that a WAIT holds up nothing else. The store counts as
 * available when its commands connection and its pub/sub connection are up (so a publication after a recovery
 * reaches the subscribers) and, with acknowledged writes, at least one of their connections is: one is enough for
 * every acknowledged write, and whether Redis answers is for the commands connection to say.
 */
export class RedisStateStore implements StateStore {
  readonly kind = 'redis';
  /** Seals and opens every value (NO_RECORD_MAC without a key file); scripts writing records use it too. */
  readonly mac: RecordMac;
  private readonly client: RedisLink;
  private readonly subscriber: RedisLink;
  /** Acknowledged writes' own connections; none when no write waits for replicas. */
  private readonly acknowledging: LinkPool | undefined;
  private readonly keys: RedisKeys;
  private readonly timeoutMs: number;
  private readonly availability: StoreAvailability;
  private readonly channels = new Map<string, Channel>();
  /** Keys of acknowledged writes that failed and may still land, and the link each went on (compareAndDelete). */
  private readonly uncertainWrites = new Map<string, RedisLink>();
  /** The Redis user may not run PTTL (an ACL from before it was needed): bounded writes are plain SET NX. */
  private boundedRefused = false;
  /** The last value refused per key: a forged record is counted and logged once, not at every read or write. */
  private readonly refused = new Map<string, string>();
  private probe: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: RedisStoreOptions) {
    this.keys = new RedisKeys(options.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX, options.accountTag);
    this.timeoutMs = options.commandTimeoutMs ?? DEFAULT_REDIS_COMMAND_TIMEOUT_MS;
    this.availability = new StoreAvailability(options.log, 'redis');
    this.mac =
      options.recordMac === undefined
        ? NO_RECORD_MAC
        : new RecordMac({ ...options.recordMac, scope: this.keys.key('') });
    const createLink = options.createLink ?? createRedisLink;
    this.client = this.connect(createLink(options), 'shared');
    this.subscriber = this.connect(this.client.duplicate(), 'shared');
    const acknowledges = (options.minReplicasAcked ?? 0) !== 0;
    this.acknowledging = acknowledges
      ? new LinkPool(
          Array.from({ length: ACKNOWLEDGED_WRITE_CONNECTIONS }, () =>
            this.connect(createLink(options), 'acknowledging'),
          ),
        )
      : undefined;
  }

  /**
   * Resolves true once Redis answers, false when `timeoutMs` passes first (start, a replica's first token, the
   * tools; never on requests). With `settle`, false already at the first failure (a refused connection, a wrong
   * password).
   */
  whenAvailable(timeoutMs: number, settle = false, signal?: AbortSignal): Promise<boolean> {
    return this.availability.whenAvailable(timeoutMs, settle, signal);
  }

  /** Why the store is unavailable (the first failure of this outage, never a value); undefined while up. */
  unavailableReason(): string | undefined {
    return this.availability.downReason;
  }

  /** Whether the Redis user may run what bounded writes need (PTTL); false once Redis refused it (`check`). */
  get boundedWritesPermitted(): boolean {
    return !this.boundedRefused;
  }

  /** One PING, bounded by the command timeout (`check`; the recovery probe). */
  async ping(): Promise<void> {
    await this.run('ping', () => this.client.ping(this.keys.key('ping')));
  }

  async get(key: string): Promise<string | undefined> {
    const record = await this.read(key);
    return record.found === 'value' ? record.value : undefined;
  }

  async read(key: string): Promise<ReadRecord> {
    const stored = await this.run('get', () => this.client.get(this.keys.key(key)));
    if (stored === null) return { found: 'none' };
    const opened = this.open(key, stored);
    return 'content' in opened ? { found: 'value', value: opened.content } : { found: 'refused' };
  }

  async setIfAbsent(key: string, value: string, ttlMs: number, options: WriteOptions = {}): Promise<boolean> {
    const stored = this.keys.key(key);
    const sealed = this.mac.seal(key, value);
    const ms = ttl(ttlMs);
    const plain = (target: WriteTarget) => target.setIfAbsent(stored, sealed, ms);
    const write =
      options.bounded === true && !this.boundedRefused
        ? async (target: WriteTarget) => {
            try {
              return await this.script(
                SET_IF_ABSENT_BOUNDED,
                { keys: { key }, args: { value: sealed, ttlMs: ms } },
                target,
              );
            } catch (err) {
              if (!(err instanceof ErrorReply && isNotPermitted(err.message))) throw err;
              this.refuseBounded();
              return plain(target);
            }
          }
        : plain;
    return this.overRefused([key], options, () => this.write('set_if_absent', [key], options, write, isTrue));
  }

  async compareAndSet(
    key: string,
    expected: string | undefined,
    value: string,
    ttlMs: number,
    options: WriteOptions = {},
  ): Promise<boolean> {
    const input = { keys: { key }, args: { expected, value: this.mac.seal(key, value), ttlMs: ttl(ttlMs) } };
    const absentKeys = expected === undefined ? [key] : [];
    return this.overRefused(absentKeys, options, () => this.runScript(COMPARE_AND_SET, input, options));
  }

  async writeIf(
    conditions: readonly Condition[],
    writes: readonly Write[],
    options: WriteOptions = {},
  ): Promise<boolean> {
    const input = {
      keys: { conditions: conditions.map((c) => c.key), writes: writes.map((w) => w.key) },
      args: {
        holds: conditions.map((c) => c.holds),
        writes: writes.map(({ key, value, ttlMs }) => ({ value: this.mac.seal(key, value), ttlMs: ttl(ttlMs) })),
      },
    };
    const absentKeys = conditions.filter((c) => c.holds === undefined).map((c) => c.key);
    return this.overRefused(absentKeys, options, () => this.runScript(WRITE_IF, input, options));
  }

  /**
   * Deletes `key` when it holds `expected`. After an acknowledged write of `key` that failed (it may still land), on
   * that write's own link: commands on one connection run in order, so a late write can never come after the delete
   * that was to undo it (a claim left behind would answer 409 until its lease ran out).
   */
  async compareAndDelete(key: string, expected: string): Promise<boolean> {
    const link = this.uncertainWrites.get(key);
    this.uncertainWrites.delete(key);
    const via = link?.isReady === true ? link : this.client;
    return this.run(
      COMPARE_AND_DELETE.command,
      () => this.script(COMPARE_AND_DELETE, { keys: { key }, args: { expected } }, via),
      via,
    );
  }

  /**
   * A write expecting `absentKeys` to hold nothing, which found one of them taken: when what took it is a record its
   * MAC refuses, that record is deleted (exactly it: a genuine one written meanwhile stays) and the write is tried
   * once more. Refused records thus count as absent, unless the caller says they block (WriteOptions.refusedBlocks).
   */
  private async overRefused(
    absentKeys: readonly string[],
    options: WriteOptions,
    write: () => Promise<boolean>,
  ): Promise<boolean> {
    if (await write()) return true;
    if (!this.mac.on || options.refusedBlocks === true || absentKeys.length === 0) return false;
    let removed = false;
    for (const key of absentKeys) {
      const stored = this.keys.key(key);
      const raw = await this.run('get', () => this.client.get(stored));
      if (raw === null || 'content' in this.open(key, raw)) continue;
      const input = { keys: { key }, args: { stored: raw } };
      removed = (await this.run(DELETE_EXACT.command, () => this.script(DELETE_EXACT, input))) || removed;
    }
    return removed && write();
  }

  private refuseBounded(): void {
    this.boundedRefused = true;
    this.options.log?.error(
      { event: 'state_store.acl_missing', command: 'pttl' },
      "the Redis user may not run PTTL: a token lock or login cooldown written without an expiry would hold until deleted; add +pttl to the user's rules (docs/fleet.md#the-redis-user)",
    );
  }

  /** The content of `stored`, or why it is refused, reported the first time this key is found holding it. */
  private open(key: string, stored: string): OpenedRecord {
    const opened = this.mac.open(key, stored, this.refused.get(key) !== stored);
    if ('rejected' in opened) {
      this.refused.delete(key);
      this.refused.set(key, stored);
      for (const oldest of this.refused.keys()) {
        if (this.refused.size <= MAX_REFUSED_REMEMBERED) break;
        this.refused.delete(oldest);
      }
    }
    return opened;
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.run('publish', () => this.client.publish(this.keys.channel(channel), message));
  }

  async subscribe(channel: string, listener: (message: string) => void): Promise<() => Promise<void>> {
    const name = this.keys.channel(channel);
    const existing = this.channels.get(name);
    if (existing !== undefined && this.availability.available) {
      existing.listeners.add(listener);
    } else {
      await this.subscribeChannel(name, listener);
    }
    return () => this.unsubscribe(name, listener);
  }

  /**
   * A script as one write (its keys short names, all under the account's hash tag, so one slot), counted under its
   * command label: its reply, as the script reads it. Acknowledged: resolves once the configured replicas hold what
   * it wrote, when the script says from its reply that it wrote anything.
   */
  runScript<Keys, Args, Reply>(
    script: RedisScript<Keys, Args, Reply>,
    input: ScriptInput<Keys, Args>,
    options: WriteOptions = {},
  ): Promise<Reply> {
    const call = script.call(input);
    const send = async (target: WriteTarget) => script.reply(await this.evaluate(script, call, target));
    return this.write(script.command, call.keys, options, send, (reply) => script.wrote(reply), script.sha1);
  }

  /** The stored name of a short key name: what a script builds other keys of the account from. */
  storedKey(name: string): string {
    return this.keys.key(name);
  }

  /** XGROUP CREATE ... MKSTREAM from the stream's start; a group that exists already is left as it is. */
  async streamGroupCreate(key: string, group: string): Promise<void> {
    const stored = this.keys.key(key);
    await this.run('stream_group_create', async () => {
      try {
        await this.client.command(stored, ['XGROUP', 'CREATE', stored, group, '0', 'MKSTREAM']);
      } catch (err) {
        if (!(err instanceof ErrorReply && err.message.startsWith('BUSYGROUP'))) throw err;
      }
    });
  }

  /**
   * XREADGROUP without BLOCK: new entries for `consumer` (or, `own`, those it was given and has not acknowledged), at
   * most `count`. Never blocking, because the connection is shared with every other command of the store.
   */
  async streamReadGroup(
    key: string,
    group: string,
    consumer: string,
    count: number,
    which: 'new' | 'own' = 'new',
  ): Promise<StreamEntry[]> {
    const stored = this.keys.key(key);
    const from = which === 'new' ? '>' : '0';
    const args = ['XREADGROUP', 'GROUP', group, consumer, 'COUNT', String(count), 'STREAMS', stored, from];
    const reply = await this.run('stream_read_group', () => this.client.command(stored, args));
    if (!Array.isArray(reply) || reply.length === 0) return [];
    const stream: unknown = reply[0];
    return Array.isArray(stream) ? streamEntries(stream[1]) : [];
  }

  /** XAUTOCLAIM: entries pending longer than `minIdleMs` on any consumer become `consumer`'s (at most `count`). */
  async streamAutoClaim(
    key: string,
    group: string,
    consumer: string,
    minIdleMs: number,
    count: number,
  ): Promise<StreamEntry[]> {
    const stored = this.keys.key(key);
    const args = ['XAUTOCLAIM', stored, group, consumer, String(minIdleMs), '0-0', 'COUNT', String(count)];
    const reply = await this.run('stream_auto_claim', () => this.client.command(stored, args));
    return Array.isArray(reply) ? streamEntries(reply[1]) : [];
  }

  isAvailable(): boolean {
    return this.availability.available;
  }

  onAvailabilityChange(listener: (available: boolean) => void): void {
    this.availability.onChange(listener);
  }

  close(): Promise<void> {
    this.closed = true;
    clearInterval(this.probe);
    this.availability.close();
    this.channels.clear();
    // destroy, not QUIT: the store closes last at shutdown, nothing is in flight, and a QUIT to a Redis that is
    // down would wait for it. Every link, open or not: one between two attempts at its first connection is not open,
    // and only its destroy ends the attempts.
    for (const connection of [this.subscriber, this.client, ...(this.acknowledging?.links ?? [])]) connection.destroy();
    return Promise.resolve();
  }

  /**
   * One write; acknowledged (`options.acknowledged` and replicas configured), it and its WAIT go on one connection
   * held on one of the acknowledged writes' links, and the WAIT counts only when `written` says the reply wrote
   * something (a key already held was written, and waited for, by someone else). `script`: the sha1 of the script the
   * write runs.
   */
  private async write<T>(
    command: StateStoreCommand,
    keys: readonly string[],
    options: WriteOptions,
    send: (target: WriteTarget) => Promise<T>,
    written: (reply: T) => boolean,
    script?: string,
  ): Promise<T> {
    const pool = this.acknowledging;
    if (options.acknowledged !== true || pool === undefined) return this.run(command, () => send(this.client));
    const started = performance.now();
    try {
      return await pool.use(async (link) => {
        try {
          const wanted = await this.replicasWanted();
          // No replica to wait for (`auto`, a cluster without replicas): written as any write, routed by its keys.
          if (wanted === 0) return await this.run(command, () => send(link), link);
          const made = async () => {
            const connection = await link.hold(this.keys.key(keys[0] ?? ''));
            // Queued behind the write, before its reply: one round trip for both (waited for only when it wrote).
            // Not behind a script this Redis may not have: its EVAL would then wait behind that WAIT.
            const pipelined = script === undefined || connection.hasScript(script);
            const sent = send(connection);
            const waiting = pipelined ? connection.wait(wanted, this.waitMs) : undefined;
            waiting?.catch(() => undefined);
            return { connection, waiting, reply: await sent };
          };
          const { connection, waiting, reply } = await this.run(command, made, link);
          if (written(reply)) await this.replicated(link, connection, wanted, waiting);
          return reply;
        } catch (err) {
          this.rememberUncertain(keys, link);
          throw err;
        }
      });
    } catch (err) {
      if (!(err instanceof PoolNotConnected)) throw err;
      this.observe(command, 'unavailable', started);
      throw new StateStoreUnavailableError(`redis ${command}: not connected`, { cause: err });
    }
  }

  /** A failed acknowledged write's keys, and its link: a delete that follows goes there (compareAndDelete). */
  private rememberUncertain(keys: readonly string[], link: RedisLink): void {
    for (const key of keys) {
      this.uncertainWrites.delete(key);
      this.uncertainWrites.set(key, link);
    }
    // Bounded: the oldest go first (a failed write nobody deletes after, such as a postback's append).
    for (const oldest of this.uncertainWrites.keys()) {
      if (this.uncertainWrites.size <= MAX_UNCERTAIN_WRITES) break;
      this.uncertainWrites.delete(oldest);
    }
  }

  /**
   * WAIT's answer for a write: how many replicas hold the writes its connection made before it, once they do or its
   * timeout passed. The number is checked: fewer is a write a failover could take back, so the caller must act as for
   * a store that did not answer. So is a connection replaced between the write and the WAIT's answer: the WAIT then
   * ran on a connection that never made the write. `waiting`, when queued behind the write, answers for it unless
   * the write went after it after all (its script sent again, its command redirected): a WAIT of its own then does.
   */
  private async replicated(
    link: RedisLink,
    connection: HeldConnection,
    wanted: number,
    waiting: Promise<number> | undefined,
  ): Promise<void> {
    await this.run(
      'wait',
      async () => {
        // The pipelined WAIT only when it counts the write: not waited for otherwise (on a node a redirect left, it
        // may fail or block, and the write is made elsewhere).
        const acknowledged =
          waiting !== undefined && !connection.sentSinceWait
            ? await waiting
            : await connection.wait(wanted, this.waitMs);
        if (connection.replaced) throw new ConnectionReplaced();
        if (acknowledged < wanted) throw new ReplicasBehind(acknowledged, wanted);
      },
      link,
    );
  }

  /**
   * WAIT's own timeout, half the command timeout: Redis answers with its count, and the reply has room to travel and
   * be read on a busy event loop, before the store gives up on the command.
   */
  private get waitMs(): number {
    return Math.max(1, Math.floor(this.timeoutMs / 2));
  }

  /** The replica count to wait for; `auto` asks the cluster's view at the moment of the write (before it is sent). */
  private async replicasWanted(): Promise<number> {
    const setting = this.options.minReplicasAcked ?? 0;
    if (setting !== 'auto') return setting;
    return (await this.topology()).replicas > 0 ? 1 : 0;
  }

  /** The primary and its replicas (or the cluster's primaries, replicas and slots) as the client sees them now. */
  async topology(): Promise<TopologyView> {
    return this.run('ping', () => this.client.view(this.keys.key('topology')));
  }

  /**
   * Attaches the listeners, then starts connecting (and reconnecting, with capped backoff) in the background. An
   * acknowledging link that fails takes the store down only when it was the last of them connected.
   */
  private connect(link: RedisLink, role: LinkRole): RedisLink {
    // node-redis emits `error` for every failed attempt and throws when nobody listens: always listened to.
    link.onError((err: unknown) => this.failed(role, describeRedisError(err)));
    link.onReady(() => this.markUpIfConnected());
    void link.connect().then(() => this.markUpIfConnected());
    return link;
  }

  private async subscribeChannel(name: string, listener: (message: string) => void): Promise<void> {
    const channel = this.channels.get(name) ?? this.newChannel(name);
    channel.listeners.add(listener);
    try {
      await this.run('subscribe', () => this.subscriber.subscribe(name, channel.dispatch), this.subscriber);
    } catch (err) {
      await this.unsubscribe(name, listener);
      throw err;
    }
  }

  private newChannel(name: string): Channel {
    const listeners = new Set<(message: string) => void>();
    const dispatch = (message: string) => {
      for (const listener of [...listeners]) {
        try {
          listener(message);
        } catch {
          // A subscriber's bug must not stop the others nor reach node-redis' parser.
        }
      }
    };
    const channel = { listeners, dispatch };
    this.channels.set(name, channel);
    return channel;
  }

  /** Best effort on Redis (the local listener is gone either way): never rejects. */
  private async unsubscribe(name: string, listener: (message: string) => void): Promise<void> {
    const channel = this.channels.get(name);
    if (channel === undefined || !channel.listeners.delete(listener) || channel.listeners.size > 0) return;
    this.channels.delete(name);
    // Not connected (a subscribe that just failed, an outage): no UNSUBSCRIBE to wait for. A subscription node-redis
    // would restore after reconnecting dispatches to a channel with no listeners left, so nothing is delivered.
    if (this.closed || !this.subscriber.isReady) return;
    await withTimeout(this.subscriber.unsubscribe(name, channel.dispatch), this.timeoutMs).catch(() => undefined);
  }

  /** One call of a script on `target`, within a command or write of the store's own: its reply, read. */
  private async script<Keys, Args, Reply>(
    script: RedisScript<Keys, Args, Reply>,
    input: ScriptInput<Keys, Args>,
    target: WriteTarget = this.client,
  ): Promise<Reply> {
    return script.reply(await this.evaluate(script, script.call(input), target));
  }

  /**
   * A script over several keys, retried on TRYAGAIN: while a Redis Cluster migrates the account's slot, a script
   * whose keys are not all on one side yet is refused until they are (Redis' own advice: retry shortly). Bounded by
   * the command timeout like any command.
   */
  private async evaluate(
    script: Pick<RedisScript<unknown, unknown, unknown>, 'sha1' | 'source'>,
    call: ScriptCall,
    target: WriteTarget,
  ): Promise<unknown> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.evaluateOnce(script, call, target);
      } catch (err) {
        const migrating = err instanceof ErrorReply && err.message.startsWith('TRYAGAIN');
        if (!migrating || call.keys.length < 2 || this.closed || attempt * TRYAGAIN_PAUSE_MS >= this.timeoutMs)
          throw err;
        await sleep(TRYAGAIN_PAUSE_MS);
      }
    }
  }

  /** EVALSHA, or EVAL when this Redis has not seen the script yet (after a restart, a failover, a SCRIPT FLUSH). */
  private async evaluateOnce(
    script: Pick<RedisScript<unknown, unknown, unknown>, 'sha1' | 'source'>,
    call: ScriptCall,
    target: WriteTarget,
  ): Promise<unknown> {
    const stored = call.keys.map((name) => this.keys.key(name));
    try {
      return await target.evalSha(script.sha1, stored, call.args);
    } catch (err) {
      if (!(err instanceof ErrorReply) || !err.message.startsWith('NOSCRIPT')) throw err;
      return await target.eval(script.source, stored, call.args);
    }
  }

  /** One command, bounded by the command timeout, timed, and turned into StateStoreUnavailableError on failure. */
  private async run<T>(command: StateStoreCommand, send: () => Promise<T>, via: RedisLink = this.client): Promise<T> {
    const started = performance.now();
    if (this.closed || !this.client.isReady || !via.isReady) {
      this.observe(command, 'unavailable', started);
      // Up until now, and a link not connected: it lost its connection without an error event (the Sentinel client
      // moving to a new primary reports only its nodes' own events, and may not reach it for a while).
      if (!this.closed && this.availability.available) {
        this.failed(this.client.isReady ? this.roleOf(via) : 'shared', 'not connected');
      }
      throw new StateStoreUnavailableError(`redis ${command}: not connected`);
    }
    try {
      const reply = await withTimeout(send(), this.timeoutMs);
      this.observe(command, 'ok', started);
      this.markUpIfConnected();
      return reply;
    } catch (err) {
      this.observe(command, err instanceof RedisCommandTimeout ? 'timeout' : 'error', started);
      const reason = describeRedisError(err);
      // A failure on an acknowledged write's own connection (replicas behind, a WAIT past its deadline, a link that
      // dropped) refuses that write only: Redis itself may answer, and the store stays available (the token, reads).
      this.failed(this.roleOf(via), reason);
      throw new StateStoreUnavailableError(`redis ${command}: ${reason}`, { cause: err });
    }
  }

  private roleOf(link: RedisLink): LinkRole {
    return link === this.client || link === this.subscriber ? 'shared' : 'acknowledging';
  }

  private observe(command: StateStoreCommand, outcome: StateStoreOutcome, started: number): void {
    this.options.onCommand?.(command, outcome, (performance.now() - started) / 1_000);
  }

  private markUpIfConnected(): void {
    if (this.closed || !this.client.isReady || !this.subscriber.isReady) return;
    if (this.acknowledging !== undefined && !this.acknowledging.anyReady()) return;
    clearInterval(this.probe);
    this.probe = undefined;
    this.availability.up();
  }

  /** A connection failed: the store is down, unless it was an acknowledging link and another one is connected. */
  private failed(role: LinkRole, reason: string): void {
    if (role === 'acknowledging' && this.acknowledging?.anyReady() !== false) return;
    this.markDown(reason);
  }

  private markDown(reason: string): void {
    if (this.closed) return;
    this.availability.down(reason);
    // Connected but failing (timeouts, refusals): nothing else would notice a recovery if no caller asked again.
    this.probe ??= setInterval(() => void this.probeOnce(), PROBE_INTERVAL_MS).unref();
  }

  private async probeOnce(): Promise<void> {
    if (!this.client.isReady) return;
    await this.ping().catch(() => undefined);
  }
}

/** RESP2 stream entries, `[[id, [field, value, ...]], ...]`; an entry deleted meanwhile (null fields) is left out. */
function streamEntries(raw: unknown): StreamEntry[] {
  if (!Array.isArray(raw)) return [];
  const entries: StreamEntry[] = [];
  for (const item of raw) {
    if (!Array.isArray(item) || !Array.isArray(item[1])) continue;
    const flat = (item[1] as unknown[]).map(String);
    const fields: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i] ?? ''] = flat[i + 1] ?? '';
    entries.push({ id: String(item[0]), fields });
  }
  return entries;
}

const isTrue = (written: boolean): boolean => written;
/** An ACL refusal: NOPERM for a command, or a script's command the user may not run (Redis 7 says it thus). */
const isNotPermitted = (message: string): boolean =>
  message.startsWith('NOPERM') || message.includes("can't run this command");

/** Redis PX takes whole milliseconds, at least 1. A TTL that is no number is the caller's bug, not an outage. */
function ttl(ms: number): number {
  if (!Number.isFinite(ms)) throw new RangeError(`TTL must be a finite number of milliseconds, not ${ms}`);
  return Math.max(1, Math.ceil(ms));
}

/**
 * The command's own promise keeps running after a timeout; Promise.race has already handled its rejection.
 *
 * The deadline is judged once the event loop has read what arrived. Its timer runs in the loop's timers phase, which
 * comes before the poll phase that reads sockets: after the loop was held up past the deadline (a long collection, a
 * starved host), a reply that Redis sent in time would lose to the timer, and its request be refused for nothing.
 * So the rejection waits for setImmediate's check phase, after that poll.
 */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => setImmediate(() => reject(new RedisCommandTimeout(ms))), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}
