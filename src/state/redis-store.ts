import { setTimeout as sleep } from 'node:timers/promises';
import { ErrorReply } from '@redis/client';
import type { Logger } from '../observability/log.js';
import type { StateStoreCommand, StateStoreOutcome } from '../observability/state-store-metrics.js';
import { createRedisLink, type RedisConnectionOptions, type RedisLink, type TopologyView } from './redis-client.js';
import { describeRedisError, RedisCommandTimeout, ReplicasBehind } from './redis-errors.js';
import { DEFAULT_REDIS_KEY_PREFIX, RedisKeys } from './redis-keys.js';
import { COMPARE_AND_DELETE, COMPARE_AND_SET, WRITE_IF, type LuaScript } from './redis-scripts.js';
import { StoreAvailability } from './store-availability.js';
import {
  StateStoreUnavailableError,
  type Condition,
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
 * node-redis subscribes again after every reconnect; the store counts as available only when both are up, so a
 * publication after a recovery reaches the subscribers.
 */
export class RedisStateStore implements StateStore {
  readonly kind = 'redis';
  private readonly client: RedisLink;
  private readonly subscriber: RedisLink;
  private readonly keys: RedisKeys;
  private readonly timeoutMs: number;
  private readonly availability: StoreAvailability;
  private readonly channels = new Map<string, Channel>();
  private probe: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: RedisStoreOptions) {
    this.keys = new RedisKeys(options.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX, options.accountTag);
    this.timeoutMs = options.commandTimeoutMs ?? DEFAULT_REDIS_COMMAND_TIMEOUT_MS;
    this.availability = new StoreAvailability(options.log, 'redis');
    this.client = this.connect(createRedisLink(options));
    this.subscriber = this.connect(this.client.duplicate());
  }

  /**
   * Resolves true once Redis answers, false when `timeoutMs` passes first (start and tests; never on requests).
   * With `settle`, false already at the first failure (a refused connection, a wrong password).
   */
  whenAvailable(timeoutMs: number, settle = false): Promise<boolean> {
    return this.availability.whenAvailable(timeoutMs, settle);
  }

  /** Why the store is unavailable (the first failure of this outage, never a value); undefined while up. */
  unavailableReason(): string | undefined {
    return this.availability.downReason;
  }

  /** One PING, bounded by the command timeout (`check`; the recovery probe). */
  async ping(): Promise<void> {
    await this.run('ping', () => this.client.ping(this.keys.key('ping')));
  }

  async get(key: string): Promise<string | undefined> {
    const value = await this.run('get', () => this.client.get(this.keys.key(key)));
    return value ?? undefined;
  }

  async setIfAbsent(key: string, value: string, ttlMs: number, options: WriteOptions = {}): Promise<boolean> {
    const written = await this.run('set_if_absent', () =>
      this.client.setIfAbsent(this.keys.key(key), value, ttl(ttlMs)),
    );
    // Acknowledged only when written: a key already held was written (and waited for) by someone else.
    if (written && options.acknowledged === true) await this.replicated(key);
    return written;
  }

  async compareAndSet(
    key: string,
    expected: string | undefined,
    value: string,
    ttlMs: number,
    options: WriteOptions = {},
  ): Promise<boolean> {
    const args = [expected === undefined ? '0' : '1', expected ?? '', value, String(ttl(ttlMs))];
    const written = (await this.run('compare_and_set', () => this.script(COMPARE_AND_SET, [key], args))) === 1;
    if (written && options.acknowledged === true) await this.replicated(key);
    return written;
  }

  async writeIf(
    conditions: readonly Condition[],
    writes: readonly Write[],
    options: WriteOptions = {},
  ): Promise<boolean> {
    const keyNames = [...conditions.map((c) => c.key), ...writes.map((w) => w.key)];
    const args = [String(conditions.length)];
    for (const { holds } of conditions) args.push(holds === undefined ? '0' : '1', holds ?? '');
    for (const { value, ttlMs } of writes) args.push(value, String(ttl(ttlMs)));
    const written = (await this.run('write_if', () => this.script(WRITE_IF, keyNames, args))) === 1;
    if (written && options.acknowledged === true) await this.replicated(keyNames[0] ?? '');
    return written;
  }

  async compareAndDelete(key: string, expected: string): Promise<boolean> {
    return (await this.run('compare_and_delete', () => this.script(COMPARE_AND_DELETE, [key], [expected]))) === 1;
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
   * One of the caller's scripts over `keyNames` (short names, all under the account's hash tag, so one slot): its
   * reply as Redis sends it. Acknowledged: resolves once the configured replicas hold what it wrote.
   */
  async evalScript(
    command: StateStoreCommand,
    script: LuaScript,
    keyNames: readonly string[],
    args: readonly string[],
    options: WriteOptions = {},
  ): Promise<unknown> {
    const reply = await this.run(command, () => this.script(script, keyNames, [...args]));
    if (options.acknowledged === true) await this.replicated(keyNames[0] ?? '');
    return reply;
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
    this.channels.clear();
    // destroy, not QUIT: the store closes last at shutdown, nothing is in flight, and a QUIT to a Redis that is
    // down would wait for it.
    for (const connection of [this.subscriber, this.client]) {
      if (connection.isOpen) connection.destroy();
    }
    return Promise.resolve();
  }

  /**
   * WAIT: blocks until the writes this connection made so far are held by the configured number of replicas, or
   * its timeout passes, and answers how many replicas have them. The number is checked: fewer is a write a failover
   * could take back, so the caller must act as for a store that did not answer. WAIT's own timeout is kept inside
   * the command timeout so that Redis answers with its count before the store gives up on the command.
   */
  private async replicated(key: string): Promise<void> {
    const wanted = await this.replicasWanted();
    if (wanted === 0) return;
    // Half the command timeout: room for the reply to travel and be read on a busy event loop before our own deadline.
    const waitMs = Math.max(1, Math.floor(this.timeoutMs / 2));
    await this.run('wait', async () => {
      const acknowledged = await this.client.wait(this.keys.key(key), wanted, waitMs);
      if (acknowledged < wanted) throw new ReplicasBehind(acknowledged, wanted);
    });
  }

  /** The replica count to wait for; `auto` asks the cluster's view at the moment of the write. */
  private async replicasWanted(): Promise<number> {
    const setting = this.options.minReplicasAcked ?? 0;
    if (setting !== 'auto') return setting;
    return (await this.topology()).replicas > 0 ? 1 : 0;
  }

  /** The primary and its replicas (or the cluster's primaries, replicas and slots) as the client sees them now. */
  async topology(): Promise<TopologyView> {
    return this.run('ping', () => this.client.view(this.keys.key('topology')));
  }

  /** Attaches the listeners, then starts connecting (and reconnecting, with capped backoff) in the background. */
  private connect(link: RedisLink): RedisLink {
    // node-redis emits `error` for every failed attempt and throws when nobody listens: always listened to.
    link.onError((err: unknown) => this.markDown(describeRedisError(err)));
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

  /**
   * A script over several keys, retried on TRYAGAIN: while a Redis Cluster migrates the account's slot, a script
   * whose keys are not all on one side yet is refused until they are (Redis' own advice: retry shortly). Bounded by
   * the command timeout like any command.
   */
  private async script(script: LuaScript, keyNames: readonly string[], args: string[]): Promise<unknown> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.scriptOnce(script, keyNames, args);
      } catch (err) {
        const migrating = err instanceof ErrorReply && err.message.startsWith('TRYAGAIN');
        if (!migrating || keyNames.length < 2 || this.closed || attempt * TRYAGAIN_PAUSE_MS >= this.timeoutMs)
          throw err;
        await sleep(TRYAGAIN_PAUSE_MS);
      }
    }
  }

  /** EVALSHA, or EVAL when this Redis has not seen the script yet (after a restart, a failover, a SCRIPT FLUSH). */
  private async scriptOnce(script: LuaScript, keyNames: readonly string[], args: string[]): Promise<unknown> {
    const stored = keyNames.map((name) => this.keys.key(name));
    try {
      return await this.client.evalSha(script.sha1, stored, args);
    } catch (err) {
      if (!(err instanceof ErrorReply) || !err.message.startsWith('NOSCRIPT')) throw err;
      return await this.client.eval(script.source, stored, args);
    }
  }

  /** One command, bounded by the command timeout, timed, and turned into StateStoreUnavailableError on failure. */
  private async run<T>(command: StateStoreCommand, send: () => Promise<T>, via: RedisLink = this.client): Promise<T> {
    const started = performance.now();
    if (this.closed || !this.client.isReady || !via.isReady) {
      this.observe(command, 'unavailable', started);
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
      // Replicas behind: Redis itself answers, so the store stays available (the token, reads); the write is refused.
      if (!(err instanceof ReplicasBehind)) this.markDown(reason);
      throw new StateStoreUnavailableError(`redis ${command}: ${reason}`, { cause: err });
    }
  }

  private observe(command: StateStoreCommand, outcome: StateStoreOutcome, started: number): void {
    this.options.onCommand?.(command, outcome, (performance.now() - started) / 1_000);
  }

  private markUpIfConnected(): void {
    if (this.closed || !this.client.isReady || !this.subscriber.isReady) return;
    clearInterval(this.probe);
    this.probe = undefined;
    this.availability.up();
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

/** Redis PX takes whole milliseconds, at least 1. A TTL that is no number is the caller's bug, not an outage. */
function ttl(ms: number): number {
  if (!Number.isFinite(ms)) throw new RangeError(`TTL must be a finite number of milliseconds, not ${ms}`);
  return Math.max(1, Math.ceil(ms));
}

/** The command's own promise keeps running after a timeout; Promise.race has already handled its rejection. */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisCommandTimeout(ms)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}
