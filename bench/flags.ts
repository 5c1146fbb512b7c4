// npm run bench:flags [-- --rounds 6 --seconds 5] [-- --try=--some-v8-flag --try=SOME_VARIABLE=value ...]: whether each node flag and
// tuning variable the image sets still pays for itself. For each one, a sidecar with the image's runtime and a
// sidecar without that setting (or with a --try setting added) are saturated in turns; the paired medians say what
// the setting is worth per CPU second and in RSS at rest and under load. The sidecar alone: a setting is judged by
// what it does to the product, the floor's figures moving with it are beside the point. All on 127.0.0.1, bounded
// in time; the children and the key are removed at the end. Prints a markdown table; exit 0 (a report, no target).
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { saturate } from './load.js';
import { rssMb, stopAll } from './processes.js';
import * as stack from './stack.js';

const { values: options } = parseArgs({
  options: {
    rounds: { type: 'string', default: '6' },
    seconds: { type: 'string', default: '5' },
    try: { type: 'string', multiple: true, default: [] },
  },
});
const [ROUNDS, SECONDS, CONNECTIONS] = [Number(options.rounds), Number(options.seconds), 64];
/** Worth keeping: at least this much less RSS under load at no CPU cost, or this much more throughput per core. */
const [MEMORY_WORTH_MB, CPU_WORTH, CPU_TOLERANCE] = [2, 1.03, 0.97];
const say = (text: string): boolean => process.stdout.write(`${text}\n`);
const median = (xs: readonly number[]): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] ?? Number.NaN) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

interface Variant {
  /** What differs from the image's runtime, as the table shows it. */
  readonly name: string;
  /** True: the image sets it and the variant leaves it out; false: a candidate the variant adds. */
  readonly shipped: boolean;
  readonly runtime: stack.Runtime;
}

const image = stack.IMAGE_RUNTIME;
const withoutFlag = (flag: string): Variant => ({
  name: flag,
  shipped: true,
  runtime: { flags: image.flags.filter((f) => f !== flag), env: image.env },
});
const withoutEnv = (name: string): Variant => {
  const { [name]: value, ...env } = image.env;
  return { name: `${name}=${value}`, shipped: true, runtime: { flags: image.flags, env } };
};
/** A candidate: a node flag (`--...`) or a variable (`NAME=value`) added to the image's runtime. */
const tried = (setting: string): Variant => {
  const [name, value] = setting.split('=', 2);
  const runtime = setting.startsWith('--')
    ? { flags: [...image.flags, setting], env: image.env }
    : { flags: image.flags, env: { ...image.env, [name ?? '']: value ?? '' } };
  return { name: setting, shipped: false, runtime };
};
// NODE_ENV is the image's mode, not a tuning setting: it stays in every variant.
const variants = [
  ...image.flags.map(withoutFlag),
  ...Object.keys(image.env)
    .filter((name) => name !== 'NODE_ENV')
    .map(withoutEnv),
  ...(options.try ?? []).map(tried),
];

interface Row {
  readonly variant: Variant;
  /** The image's runtime per CPU second over the variant's (paired median): above 1, the setting is faster. */
  readonly cpu: number;
  /** The variant's RSS minus the image runtime's, MB (at rest; under load, paired median of each round's peak). */
  readonly idleMb: number;
  readonly loadMb: number;
  readonly errors: number;
}

async function compare(ws: stack.Workspace, gatewayUrl: string, variant: Variant): Promise<Row> {
  const shipped = await stack.startSidecar(ws, gatewayUrl);
  const other = await stack.startSidecar(ws, gatewayUrl, undefined, {}, variant.runtime);
  try {
    await sleep(3000);
    const idleMb = rssMb(other.pid) - rssMb(shipped.pid);
    const turns = { warmupSeconds: 3, seconds: ROUNDS * SECONDS, rounds: ROUNDS, connections: CONNECTIONS };
    const [a, b] = await saturate([shipped, other], turns);
    if (!a || !b) throw new Error('a saturated process has no figures');
    const paired = (of: (r: number) => number): number => median(a.rounds.map((_, r) => of(r)));
    const round = (r: number) => ({ a: a.rounds[r], b: b.rounds[r] });
    return {
      variant,
      cpu: paired((r) => (round(r).a?.perCore ?? Number.NaN) / (round(r).b?.perCore ?? Number.NaN)),
      idleMb,
      loadMb: paired((r) => (round(r).b?.rssMaxMb ?? Number.NaN) - (round(r).a?.rssMaxMb ?? Number.NaN)),
      errors: a.errors + b.errors,
    };
  } finally {
    await shipped.stop();
    await other.stop();
  }
}

/**
 * What the setting gives, from its own side (a shipped one: what leaving it out costs; a candidate: what adding it
 * saves): faster per CPU second, less memory at no CPU cost, or memory bought with CPU, a trade the docs decide
 * against the container's memory request (docs/performance.md).
 */
function verdict(row: Row): string {
  const cpu = row.variant.shipped ? row.cpu : 1 / row.cpu;
  const memoryMb = row.variant.shipped ? row.loadMb : -row.loadMb;
  const saves = `${memoryMb.toFixed(0)} MB under load`;
  if (cpu >= CPU_WORTH) return row.variant.shipped ? 'pays: faster' : 'worth adding: faster';
  if (memoryMb >= MEMORY_WORTH_MB && cpu >= CPU_TOLERANCE) return `pays: ${saves} at no CPU cost`;
  if (memoryMb >= MEMORY_WORTH_MB) return `a trade: ${saves} for ${((1 - cpu) * 100).toFixed(1)} % CPU`;
  return row.variant.shipped ? 'does not pay' : 'not worth adding';
}

const ws = stack.workspaceUntilExit();
try {
  const gateway = await stack.startGateway();
  say(`node ${process.versions.node}; the image runs: node ${image.flags.join(' ')}, ${JSON.stringify(image.env)}`);
  say(`each comparison: ${ROUNDS} rounds of ${SECONDS} s saturated with ${CONNECTIONS} connections, in turns\n`);
  say('| setting | compared | image / variant per CPU s | RSS at rest | RSS under load | verdict |');
  say('| --- | --- | --- | --- | --- | --- |');
  for (const variant of variants) {
    const row = await compare(ws, gateway.url, variant);
    const mb = (x: number): string => `${x >= 0 ? '+' : ''}${x.toFixed(1)} MB`;
    const errors = row.errors > 0 ? ` (${row.errors} errors)` : '';
    const compared = variant.shipped ? 'left out' : 'added';
    say(
      `| \`${variant.name}\` | ${compared} | ${row.cpu.toFixed(3)} | ${mb(row.idleMb)} | ${mb(row.loadMb)} | ${verdict(row)}${errors} |`,
    );
  }
} finally {
  await stopAll();
}
