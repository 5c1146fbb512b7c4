// The nemesis: faults drawn from the seed (which fault, when, how long, whom it hits), several at once when they
// touch different parts (replicas, Redis, the application, the gateway, its clock, the network's links), each
// recorded with its start and end. Wall-clock timing and the machine's load still vary between runs of one seed:
// the schedule is the seed's.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pipelined, pipelinedFlood, slowHeaderHolders } from '../test/support/floods.js';
import type { FaultEvent, FaultKind } from './history.js';
import { PARTITION_KINDS, partition, type Draws, type PartitionKind } from './partitions.js';
import type { Recorder } from './recorder.js';
import { restartFromSnapshot } from './rollback.js';
import { REDIS_COMMAND_TIMEOUT_MS, RESPONSE_TIMEOUT_MS, sleep, type World } from './world.js';

type Group = 'replicas' | 'redis' | 'application' | 'gateway' | 'clock' | 'password' | 'neighbour' | 'network';
export type PlanKind = FaultKind | 'application';

/** `holdMs`: how long the fault lasts (a cut, the writes before a rollback), in place of the seed's draw. */
export interface FaultOptions {
  readonly holdMs?: number;
}

/** How long a replica may take to count a wipe (the sidecar reads its store epoch every 2 s). */
const WIPE_NOTICE_BOUND_MS = 15_000;

interface FaultPlan {
  readonly kind: PlanKind;
  readonly group: Group;
  readonly weight: number;
  /** Cuts links: drawn only in a `namespaces` world. */
  readonly cutsLinks?: true;
}

const PLANS: readonly FaultPlan[] = [
  { kind: 'replica-kill', group: 'replicas', weight: 3 },
  { kind: 'rolling-restart', group: 'replicas', weight: 1 },
  { kind: 'redis-primary-kill', group: 'redis', weight: 2 },
  { kind: 'redis-pause', group: 'redis', weight: 2 },
  // Rare: it destroys the fleet's data by design, and each one costs what the checker then explains.
  { kind: 'redis-restart-empty', group: 'redis', weight: 1 },
  // Rare for the same reason: a rollback to an older snapshot forgets what the fleet wrote since.
  { kind: 'redis-restart-snapshot', group: 'redis', weight: 1 },
  { kind: 'application', group: 'application', weight: 2 },
  { kind: 'gateway-commit-reset', group: 'gateway', weight: 2 },
  { kind: 'gateway-commit-slow', group: 'gateway', weight: 2 },
  { kind: 'gateway-5xx', group: 'gateway', weight: 1 },
  { kind: 'gateway-reset', group: 'gateway', weight: 1 },
  { kind: 'token-revoke', group: 'gateway', weight: 2 },
  { kind: 'clock-step', group: 'clock', weight: 1 },
  { kind: 'password-rotation', group: 'password', weight: 1 },
  { kind: 'hostile-neighbour', group: 'neighbour', weight: 2 },
  // One group: one set of cuts at a time, over faults of every other group. Together as often as the Redis faults.
  { kind: 'partition-primary', group: 'network', weight: 1, cutsLinks: true },
  { kind: 'partition-sidecar', group: 'network', weight: 2, cutsLinks: true },
  { kind: 'partition-sentinels', group: 'network', weight: 1, cutsLinks: true },
  { kind: 'one-way-loss', group: 'network', weight: 1, cutsLinks: true },
  { kind: 'flapping-link', group: 'network', weight: 1, cutsLinks: true },
];

/**
 * A hostile neighbour, scaled to a machine that also runs the whole fleet: per flood this many connections, each
 * writing 64 KB of pipelined requests again and again (the postback port is the internet's through the ingress;
 * the admin port any pod's), and connections holding unfinished headers on the postback port.
 */
const NEIGHBOUR = { postbackConnections: 128, adminConnections: 64, holders: 100 } as const;

export class Nemesis {
  private readonly busy = new Set<Group>();
  private readonly active = new Set<Promise<void>>();
  readonly errors: string[] = [];

  private readonly forced: FaultPlan[];
  /** The faults this world can have: no cut links on loopback. */
  private readonly plans: readonly FaultPlan[];
  private readonly draws: Draws = {
    between: (minMs, maxMs) => this.between(minMs, maxMs),
    index: (length) => Math.min(length - 1, Math.floor(this.random() * length)),
    chance: (probability) => this.random() < probability,
  };

  /** `forced`: fault kinds that take the place of the draws made from a third of the run on, one each (--fault). */
  constructor(
    private readonly world: World,
    private readonly recorder: Recorder,
    private readonly random: () => number,
    forced: readonly PlanKind[] = [],
  ) {
    this.plans = PLANS.filter((plan) => plan.cutsLinks !== true || world.network === 'namespaces');
    this.forced = forced.map((kind) => this.plan(kind));
  }

  private plan(kind: PlanKind): FaultPlan {
    const plan = PLANS.find((candidate) => candidate.kind === kind);
    if (plan === undefined) throw new Error(`no fault ${kind}: ${PLANS.map((p) => p.kind).join(', ')}`);
    if (!this.plans.includes(plan)) throw new Error(`${kind} cuts links: it needs --network namespaces`);
    return plan;
  }

  /** One fault now, whatever else is on; resolves once it has healed (a test's fault after fault). */
  async inflictOnce(kind: PlanKind, options: FaultOptions = {}): Promise<void> {
    await this.inflict(this.plan(kind), options);
  }

  /** Starts faults until `untilMs` (recorder time); resolves once the last one has healed. */
  async run(untilMs: number): Promise<void> {
    // The first seconds without faults: every caller has had answers before anything breaks.
    await sleep(3_000);
    while (this.recorder.now() < untilMs) {
      // Drawn even when a forced fault takes its place: the rest of the seed's schedule stays the same.
      const drawn = this.pick();
      const forced = this.recorder.now() >= untilMs / 3 ? this.forced[0] : undefined;
      const plan = forced !== undefined && !this.busy.has(forced.group) ? forced : drawn;
      if (plan === forced) this.forced.shift();
      if (!this.busy.has(plan.group)) {
        this.busy.add(plan.group);
        const task = this.inflict(plan)
          .catch((err: unknown) => void this.errors.push(`${plan.kind}: ${(err as Error).message}`))
          .finally(() => {
            this.busy.delete(plan.group);
            this.active.delete(task);
          });
        this.active.add(task);
      }
      await sleep(1_000 + this.random() * 4_000);
    }
    while (this.active.size > 0) await Promise.all([...this.active]);
  }

  private pick(): FaultPlan {
    const total = this.plans.reduce((sum, plan) => sum + plan.weight, 0);
    let r = this.random() * total;
    for (const plan of this.plans) {
      r -= plan.weight;
      if (r < 0) return plan;
    }
    return this.plans[0]!;
  }

  private between(minMs: number, maxMs: number): number {
    return Math.round(minMs + this.random() * (maxMs - minMs));
  }

  /** Runs `body` as one fault: its start and end go into the history. */
  private async span(kind: FaultKind, detail: string, body: () => Promise<void>): Promise<void> {
    const start = this.recorder.now();
    try {
      await body();
    } finally {
      this.recorder.record({ type: 'fault', kind, start, end: this.recorder.now(), detail });
    }
  }

  private async inflict(plan: FaultPlan, options: FaultOptions = {}): Promise<void> {
    const { world } = this;
    if (isPartition(plan.kind)) return partition(plan.kind, world, this.recorder, this.draws, options);
    switch (plan.kind) {
      case 'replica-kill': {
        const index = Math.floor(this.random() * world.replicas.length);
        const downMs = this.between(1_000, 6_000);
        return this.span('replica-kill', `replica ${index}, restarted after ${downMs} ms`, async () => {
          await world.stopReplica(index, 'SIGKILL');
          await sleep(downMs);
          await world.startReplica(index);
        });
      }
      case 'rolling-restart':
        return this.span('rolling-restart', 'SIGTERM, then a new process, one replica after another', async () => {
          for (const replica of world.replicas) {
            await world.stopReplica(replica.index, 'SIGTERM');
            await world.startReplica(replica.index);
          }
        });
      case 'redis-primary-kill': {
        const backAfterMs = this.between(2_000, 6_000);
        const node = await world.primaryNode();
        return this.span('redis-primary-kill', `port ${node.port}, back ${backAfterMs} ms after failover`, async () => {
          const before = await world.redis.currentPrimary();
          await node.crash();
          // Only once the Sentinels promoted another: a primary restarted empty before that would wipe the data,
          // a fault of its own.
          await world.redis.failedOver(before, 60_000);
          await sleep(backAfterMs);
          await node.start();
          await world.redis.settled(60_000);
        });
      }
      case 'redis-restart-empty':
        return this.restartEmpty();
      case 'redis-restart-snapshot': {
        const keepMs = this.between(3_000, 8_000);
        return restartFromSnapshot(world, this.recorder, options.holdMs ?? keepMs);
      }
      case 'redis-pause': {
        const pauseMs = this.between(REDIS_COMMAND_TIMEOUT_MS * 2, 2_500);
        const node = await world.primaryNode();
        return this.span('redis-pause', `port ${node.port} stopped ${pauseMs} ms`, async () => {
          node.freeze();
          try {
            await sleep(pauseMs);
          } finally {
            node.thaw();
          }
          await world.redis.settled(60_000);
        });
      }
      case 'application': {
        const downMs = this.between(3_000, 12_000);
        const failingMs = this.between(2_000, 8_000);
        await this.span('app-down', `connections refused ${downMs} ms`, async () => {
          await world.application.setMode('down');
          await sleep(downMs);
        });
        return this.span('app-500', `500 to every postback ${failingMs} ms`, async () => {
          await world.application.setMode('failing');
          await sleep(failingMs);
          await world.application.setMode('up');
        });
      }
      case 'gateway-commit-reset':
        return this.gatewayFault('gateway-commit-reset', { kind: 'commit-reset', count: this.between(1, 3) });
      case 'gateway-commit-slow':
        return this.gatewayFault('gateway-commit-slow', {
          kind: 'commit-slow',
          count: this.between(1, 2),
          delay_ms: RESPONSE_TIMEOUT_MS + 2_000,
        });
      case 'gateway-5xx':
        return this.gatewayFault('gateway-5xx', { kind: '5xx', count: this.between(1, 3), status: 503 });
      case 'gateway-reset':
        return this.gatewayFault('gateway-reset', { kind: 'reset', count: this.between(1, 3) });
      case 'token-revoke':
        return this.gatewayFault('token-revoke', { kind: '401', count: 1 });
      case 'clock-step': {
        // Within the spec's window as the sidecar sees it: its timestamps up to 40 s behind or 3 s ahead.
        const offset = this.random() < 0.3 ? -this.between(1, 3) : this.between(5, 40);
        const holdMs = this.between(5_000, 20_000);
        return this.span(
          'clock-step',
          `gateway clock ${offset > 0 ? '+' : ''}${offset} s for ${holdMs} ms`,
          async () => {
            await this.control('POST', '/_sim/clock', { offset_seconds: offset });
            await sleep(holdMs);
            await this.control('POST', '/_sim/clock', { offset_seconds: 0 });
          },
        );
      }
      case 'password-rotation':
        return this.span('password-rotation', 'gateway and Secret file', () => world.rotatePassword());
      case 'hostile-neighbour':
        return this.hostileNeighbour();
    }
  }

  /**
   * Issue 45's hazard: the primary SIGKILLed and restarted at once, on its port, with no data and no persistence,
   * well within the Sentinels' down-after (1 s): no failover, and its replicas resynchronise to the empty dataset.
   * Recorded with whether the data was in fact wiped (the fleet's store epoch on the primary the Sentinels name
   * afterwards is not the one before: a failover after all would have kept it) and when a replica first counted it.
   */
  private async restartEmpty(): Promise<void> {
    const { world } = this;
    const node = await world.primaryNode();
    const before = `${node.host}:${node.port}`;
    // Whether the dataset was wiped is whether the fleet's own epoch changed: a failover after all keeps the
    // replicas' dataset and its epoch (a marker written just before could be missing there without any wipe: the
    // last writes of a primary cut off from its replicas by a partition on at the same time).
    const epochBefore = await world.storeEpoch(node);
    const noticedBefore = sum(await world.wipeCounts());
    const start = this.recorder.now();
    let detail = `port ${node.port}`;
    const event: { wiped?: boolean; noticed_at?: number | null } = {};
    let end = start;
    try {
      const crashAt = performance.now();
      await node.crash();
      // Empty means empty: a node that was once a replica kept the snapshot of its last full sync (dump.rdb, written
      // whatever `--save` says), and would load it, coming back as it was then, epoch included: a rollback, which
      // the sidecar's epoch does not tell from no wipe at all (seen in CI with seed 20261126; its own issue).
      rmSync(join(node.dir, 'dump.rdb'), { force: true });
      // A primary however it was first started: a node promoted by an earlier failover has --replicaof in its args.
      await node.start(['--replicaof', 'no', 'one']);
      const restartMs = Math.round(performance.now() - crashAt);
      const after = await world.redis.settled(60_000);
      end = this.recorder.now();
      const epochAfter = await world.storeEpoch(await world.primaryNode());
      event.wiped = epochBefore !== undefined && epochAfter !== epochBefore;
      detail +=
        ` restarted empty in ${restartMs} ms, ${after === before ? 'no failover' : `failed over to ${after}`}: ` +
        (event.wiped ? 'the dataset wiped' : 'the data kept (no wipe)');
      if (event.wiped) {
        event.noticed_at = null;
        const deadline = performance.now() + WIPE_NOTICE_BOUND_MS;
        while (performance.now() < deadline) {
          if (sum(await world.wipeCounts()) > noticedBefore) {
            event.noticed_at = this.recorder.now();
            break;
          }
          await sleep(250);
        }
      }
    } finally {
      if (end === start) end = this.recorder.now();
      const fault: Omit<FaultEvent, 't'> = { type: 'fault', kind: 'redis-restart-empty', start, end, detail, ...event };
      this.recorder.record(fault);
    }
  }

  /**
   * Floods one replica's postback and admin ports directly (not through the balancer) with pipelined requests from
   * other addresses (other loopback ones, or others on the bridge), and holds its postback port with unfinished
   * headers, for a few seconds. The replica
   * must stay up (a death is a `crash` event, a violation) and go on taking genuine postbacks and payments.
   */
  private async hostileNeighbour(): Promise<void> {
    const { world } = this;
    const index = Math.floor(this.random() * world.replicas.length);
    const replica = world.replicas[index];
    const floodMs = this.between(5_000, 12_000);
    if (replica === undefined) return;
    const sources = world.floodSources;
    const target = (port: number) => ({ host: replica.host, port, sources });
    const start = this.recorder.now();
    let detail = `replica ${index}, ${floodMs} ms`;
    try {
      const until = Date.now() + floodMs;
      const [postback, admin, closedHolders] = await Promise.all([
        pipelinedFlood(
          target(replica.ports.postback),
          NEIGHBOUR.postbackConnections,
          pipelined(
            'POST /postbacks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
          ),
          until,
        ),
        pipelinedFlood(
          target(replica.ports.admin),
          NEIGHBOUR.adminConnections,
          pipelined('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'),
          until,
        ),
        slowHeaderHolders(
          target(replica.ports.postback),
          NEIGHBOUR.holders,
          `POST /postbacks HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(8_000)}`,
          until,
        ),
      ]);
      detail += `: ${postback.connections} postback and ${admin.connections} admin flooding connections, ${closedHolders} holders cut`;
    } finally {
      this.recorder.record({ type: 'fault', kind: 'hostile-neighbour', start, end: this.recorder.now(), detail });
    }
  }

  /** Arms a gateway fault and waits until the requests it was armed for have met it (or 30 s passed). */
  private gatewayFault(kind: FaultKind, spec: Record<string, unknown>): Promise<void> {
    return this.span(kind, JSON.stringify(spec), async () => {
      await this.control('POST', '/_sim/faults', spec);
      const deadline = performance.now() + 30_000;
      while (performance.now() < deadline) {
        const armed = (await this.control('GET', '/_sim/faults')) as { faults: unknown[] };
        if (armed.faults.length === 0) break;
        await sleep(200);
      }
      await this.control('DELETE', '/_sim/faults');
      // A commit-slow answer arrives after the sidecar gave up on it: the fault lasts until then.
      if (spec.kind === 'commit-slow') await sleep(Number(spec.delay_ms));
    });
  }

  private async control(method: string, path: string, body?: unknown): Promise<unknown> {
    const answer = await this.world.control.call(method, path, body);
    if (answer.status >= 300) throw new Error(`${method} ${path}: ${answer.status} ${answer.text}`);
    return JSON.parse(answer.text) as unknown;
  }
}

const sum = (values: readonly number[]): number => values.reduce((total, value) => total + value, 0);

const isPartition = (kind: PlanKind): kind is PartitionKind => (PARTITION_KINDS as readonly string[]).includes(kind);
