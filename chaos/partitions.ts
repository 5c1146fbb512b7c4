// The nemesis's cut links (a `namespaces` world only): every process keeps running, and some of them stop hearing
// each other. Each fault draws everything it needs from the seed before it starts (so its length never shifts the
// draws after it), heals in any case, and is recorded with who was cut from whom and for how long.
import type { FaultKind } from './history.js';
import type { Recorder } from './recorder.js';
import { sleep, type World, type WorldLinks } from './world.js';
import type { Party } from '../test/support/netns.js';

export const PARTITION_KINDS = [
  'partition-primary',
  'partition-sidecar',
  'partition-sentinels',
  'one-way-loss',
  'flapping-link',
] as const satisfies readonly FaultKind[];
export type PartitionKind = (typeof PARTITION_KINDS)[number];

/** The seed's draws, as the nemesis makes them. */
export interface Draws {
  between(minMs: number, maxMs: number): number;
  /** An index in [0, length). */
  index(length: number): number;
  chance(probability: number): boolean;
}

/** `holdMs`: how long the cut lasts, in place of the drawn length (the draw is still made): a test's shorter one. */
export interface PartitionOptions {
  readonly holdMs?: number;
}

/** How long after a sidecar's link is back it may take to be ready again before the fault ends all the same. */
const READY_AGAIN_BOUND_MS = 30_000;
const SETTLE_BOUND_MS = 60_000;

export async function partition(
  kind: PartitionKind,
  world: World,
  recorder: Recorder,
  draws: Draws,
  options: PartitionOptions = {},
): Promise<void> {
  const links = world.links;
  if (links === undefined) throw new Error(`${kind} cuts links: it needs a namespaces world (--network namespaces)`);
  const fault = new Partition(kind, world, links, recorder);
  const hold = (minMs: number, maxMs: number): number => {
    const drawn = draws.between(minMs, maxMs);
    return options.holdMs ?? drawn;
  };
  switch (kind) {
    case 'partition-primary':
      return fault.primary(hold(5_000, 20_000));
    case 'partition-sidecar':
      return fault.sidecar(draws.index(world.replicas.length), hold(3_000, 15_000));
    case 'partition-sentinels':
      return fault.sentinels(draws.index(links.sentinels.length), hold(5_000, 15_000));
    case 'one-way-loss': {
      const index = draws.index(world.replicas.length);
      const fromSidecar = draws.chance(0.5);
      return fault.oneWay(index, fromSidecar, hold(2_000, 8_000));
    }
    case 'flapping-link': {
      const index = draws.index(world.replicas.length);
      const totalMs = hold(10_000, 20_000);
      // The whole schedule drawn now: cut 0.3-1 s, then up 1-3 s, until the total is covered.
      const flaps: { downMs: number; upMs: number }[] = [];
      for (let planned = 0; planned < totalMs;) {
        const flap = { downMs: draws.between(300, 1_000), upMs: draws.between(1_000, 3_000) };
        flaps.push(flap);
        planned += flap.downMs + flap.upMs;
      }
      return fault.flapping(index, flaps);
    }
  }
}

class Partition {
  constructor(
    private readonly kind: PartitionKind,
    private readonly world: World,
    private readonly links: WorldLinks,
    private readonly recorder: Recorder,
  ) {}

  /**
   * The primary cut from its replicas and from every Sentinel, the sidecars still reaching it: a minority primary
   * that goes on taking their writes (until `min-replicas-max-lag` makes it refuse them) while the Sentinels,
   * past their down-after, promote a replica. Once healed, the Sentinels turn the old primary into a replica of the
   * new one, and what it took meanwhile is gone.
   */
  async primary(holdMs: number): Promise<void> {
    const { world, links } = this;
    const node = await world.primaryNode();
    const party = this.nodeParty(node);
    const before = `${node.host}:${node.port}`;
    const others = [...links.nodes.filter((p) => p !== party), ...links.sentinels];
    await this.span(
      async () => {
        await this.cutFor(
          others.map((other) => [party, other, 'both'] as const),
          holdMs,
        );
        const after = await world.redis.settled(SETTLE_BOUND_MS);
        const role = (await node.cli('ROLE').catch(() => []))[0] ?? '?';
        return (
          `${party.name} (the primary, ${before}) cut from ${names(others)} for ${holdMs} ms; ` +
          `${after === before ? 'no failover' : `failed over to ${after}`}, ${party.name} now ${role}`
        );
      },
      `${party.name} (the primary, ${before}) cut from ${names(others)} for ${holdMs} ms`,
    );
  }

  /** One replica cut from every Redis node and Sentinel; it still reaches the gateway and the application. */
  async sidecar(index: number, holdMs: number): Promise<void> {
    const { world, links } = this;
    const party = this.replicaParty(index);
    const redis = [...links.nodes, ...links.sentinels];
    const what = `${party.name} (replica ${index}) cut from ${names(redis)} for ${holdMs} ms`;
    await this.span(async () => {
      await this.cutFor(
        redis.map((other) => [party, other, 'both'] as const),
        holdMs,
      );
      const healedAt = performance.now();
      const deadline = healedAt + READY_AGAIN_BOUND_MS;
      while (!(await world.isReady(index)) && performance.now() < deadline) await sleep(200);
      const readyMs = Math.round(performance.now() - healedAt);
      return `${what}; ${readyMs < READY_AGAIN_BOUND_MS ? `ready ${readyMs} ms after the heal` : 'not ready 30 s after the heal'}`;
    }, what);
  }

  /** One Sentinel cut from the other two and from the primary: it alone sees the primary down, and has no quorum. */
  async sentinels(index: number, holdMs: number): Promise<void> {
    const { world, links } = this;
    const sentinel = links.sentinels[index];
    if (sentinel === undefined) throw new Error(`no Sentinel ${index}`);
    const node = await world.primaryNode();
    const primary = this.nodeParty(node);
    const before = `${node.host}:${node.port}`;
    const peers = links.sentinels.filter((p) => p !== sentinel);
    const others = [...peers, primary];
    const what = `${sentinel.name} cut from ${names(peers)} and ${primary.name} (the primary) for ${holdMs} ms`;
    await this.span(async () => {
      await this.cutFor(
        others.map((other) => [sentinel, other, 'both'] as const),
        holdMs,
      );
      const after = await world.redis.settled(SETTLE_BOUND_MS);
      return `${what}; ${after === before ? 'no failover' : `failed over to ${after}`}`;
    }, what);
  }

  /** One replica's packets to the primary dropped, or the primary's to it: requests vanish, or their answers do. */
  async oneWay(index: number, fromSidecar: boolean, holdMs: number): Promise<void> {
    const sidecar = this.replicaParty(index);
    const primary = this.nodeParty(await this.world.primaryNode());
    const [from, to] = fromSidecar ? [sidecar, primary] : [primary, sidecar];
    const label = (party: Party): string =>
      party === sidecar ? `${party.name} (replica ${index})` : `${party.name} (the primary)`;
    const what = `packets from ${label(from)} to ${label(to)} dropped for ${holdMs} ms`;
    await this.span(async () => {
      await this.cutFor([[from, to, 'one-way']], holdMs);
      return what;
    }, what);
  }

  /** One replica's link to the primary cut and restored again and again: a flaky NIC, a congested switch. */
  async flapping(index: number, flaps: readonly { downMs: number; upMs: number }[]): Promise<void> {
    const sidecar = this.replicaParty(index);
    const primary = this.nodeParty(await this.world.primaryNode());
    const downMs = flaps.reduce((sum, flap) => sum + flap.downMs, 0);
    const totalMs = flaps.reduce((sum, flap) => sum + flap.downMs + flap.upMs, 0);
    const what =
      `${sidecar.name} (replica ${index}) <-> ${primary.name} (the primary): ${flaps.length} cuts of 0.3-1 s ` +
      `every 1-3 s (${downMs} ms cut in all) over ${totalMs} ms`;
    await this.span(async () => {
      for (const flap of flaps) {
        await this.cutFor([[sidecar, primary, 'both']], flap.downMs);
        await sleep(flap.upMs);
      }
      return what;
    }, what);
  }

  /** Makes the cuts, holds them `holdMs`, and heals them whatever happens. */
  private async cutFor(cuts: readonly (readonly [Party, Party, 'both' | 'one-way'])[], holdMs: number): Promise<void> {
    const { net } = this.links;
    try {
      for (const [from, to, mode] of cuts) await net.cut(from.name, to.name, mode);
      await sleep(holdMs);
    } finally {
      for (const [from, to] of cuts) await net.heal(from.name, to.name);
    }
  }

  /** Runs the fault as one span; `body` returns the detail to record (else `what`, if it failed half-way). */
  private async span(body: () => Promise<string>, what: string): Promise<void> {
    const start = this.recorder.now();
    let detail = `${what} (the fault failed before its end)`;
    try {
      detail = await body();
    } finally {
      this.recorder.record({ type: 'fault', kind: this.kind, start, end: this.recorder.now(), detail });
    }
  }

  private nodeParty(node: { readonly host: string }): Party {
    const party = this.links.nodes.find((candidate) => candidate.address === node.host);
    if (party === undefined) throw new Error(`no namespace has the address ${node.host}`);
    return party;
  }

  private replicaParty(index: number): Party {
    const party = this.links.replicas[index];
    if (party === undefined) throw new Error(`no replica ${index}`);
    return party;
  }
}

const names = (parties: readonly Party[]): string => parties.map((party) => party.name).join(', ');
