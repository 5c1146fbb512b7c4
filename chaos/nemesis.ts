// The nemesis: faults drawn from the seed (which fault, when, how long, whom it hits), several at once when they
// touch different parts (replicas, Redis, the application, the gateway, its clock), each recorded with its start
// and end. Wall-clock timing and the machine's load still vary between runs of one seed: the schedule is the seed's.
import type { FaultKind } from './history.js';
import type { Recorder } from './recorder.js';
import { REDIS_COMMAND_TIMEOUT_MS, RESPONSE_TIMEOUT_MS, sleep, type World } from './world.js';

type Group = 'replicas' | 'redis' | 'application' | 'gateway' | 'clock' | 'password';

interface FaultPlan {
  readonly kind: FaultKind | 'application';
  readonly group: Group;
  readonly weight: number;
}

const PLANS: readonly FaultPlan[] = [
  { kind: 'replica-kill', group: 'replicas', weight: 3 },
  { kind: 'rolling-restart', group: 'replicas', weight: 1 },
  { kind: 'redis-primary-kill', group: 'redis', weight: 2 },
  { kind: 'redis-pause', group: 'redis', weight: 2 },
  { kind: 'application', group: 'application', weight: 2 },
  { kind: 'gateway-commit-reset', group: 'gateway', weight: 2 },
  { kind: 'gateway-commit-slow', group: 'gateway', weight: 2 },
  { kind: 'gateway-5xx', group: 'gateway', weight: 1 },
  { kind: 'gateway-reset', group: 'gateway', weight: 1 },
  { kind: 'token-revoke', group: 'gateway', weight: 2 },
  { kind: 'clock-step', group: 'clock', weight: 1 },
  { kind: 'password-rotation', group: 'password', weight: 1 },
];

export class Nemesis {
  private readonly busy = new Set<Group>();
  private readonly active = new Set<Promise<void>>();
  readonly errors: string[] = [];

  constructor(
    private readonly world: World,
    private readonly recorder: Recorder,
    private readonly random: () => number,
  ) {}

  /** Starts faults until `untilMs` (recorder time); resolves once the last one has healed. */
  async run(untilMs: number): Promise<void> {
    // The first seconds without faults: every caller has had answers before anything breaks.
    await sleep(3_000);
    while (this.recorder.now() < untilMs) {
      const plan = this.pick();
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
    const total = PLANS.reduce((sum, plan) => sum + plan.weight, 0);
    let r = this.random() * total;
    for (const plan of PLANS) {
      r -= plan.weight;
      if (r < 0) return plan;
    }
    return PLANS[0]!;
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

  private async inflict(plan: FaultPlan): Promise<void> {
    const { world } = this;
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
          // Only once the Sentinels promoted another: a primary restarted empty before that would wipe the data
          // (issue 45), a fault of its own.
          await world.redis.failedOver(before, 60_000);
          await sleep(backAfterMs);
          await node.start();
          await world.redis.settled(60_000);
        });
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
    const res = await fetch(`${this.world.simulator.listenUrl}${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as unknown;
  }
}
