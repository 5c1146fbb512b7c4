// npm run bench:flags [-- --pairs 3 --rounds 2 --seconds 5] [-- --try=--some-v8-flag --try=SOME_VARIABLE=value ...]:
// whether each node flag and tuning variable the image sets still pays for itself. For each one, fresh pairs of a
// sidecar with the image's runtime and a sidecar without that setting (or with a --try setting added) are read at
// rest and saturated in turns (fresh-pairs.ts); the paired medians say what the setting is worth per CPU second (over
// every round of every pair) and in RSS at rest and under load (over the pairs). The sidecar alone: a setting is
// judged by what it does to the product, the floor's figures moving with it are beside the point. All on 127.0.0.1,
// bounded in time; the children and the key are removed at the end. Prints a markdown table; exit 0 (a report, no
// target).
import { parseArgs } from 'node:util';
import { freshPairs, type Memory } from './fresh-pairs.js';
import { stopAll } from './processes.js';
import * as stack from './stack.js';

const { values: options } = parseArgs({
  options: {
    pairs: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '2' },
    seconds: { type: 'string', default: '5' },
    try: { type: 'string', multiple: true, default: [] },
  },
});
const [PAIRS, ROUNDS, SECONDS, CONNECTIONS] = [
  Number(options.pairs),
  Number(options.rounds),
  Number(options.seconds),
  64,
];
/**
 * Worth keeping: at least this much less RSS (at rest or under load) at no CPU cost, or this much more throughput per
 * core.
 */
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
  /** The variant's RSS minus the image runtime's, MB: paired medians over the pairs, at rest and of the peaks. */
  readonly idleMb: number;
  readonly loadMb: number;
  readonly errors: number;
}

async function compare(ws: stack.Workspace, gatewayUrl: string, variant: Variant): Promise<Row> {
  const turns = { warmupSeconds: 3, seconds: ROUNDS * SECONDS, rounds: ROUNDS, connections: CONNECTIONS };
  const { readings, last } = await freshPairs(
    async () => [
      await stack.startSidecar(ws, gatewayUrl),
      await stack.startSidecar(ws, gatewayUrl, undefined, {}, variant.runtime),
    ],
    { pairs: PAIRS, restSeconds: 3, ...turns },
  );
  await Promise.all(last.map((p) => p.stop()));
  const gap = (of: (m: Memory) => number): number =>
    median(readings.map(({ memory: [shipped, other] }) => of(other) - of(shipped)));
  const cpu = readings.flatMap(({ saturation: [shipped, other] }) =>
    shipped.rounds.map((r, i) => r.perCore / (other.rounds[i]?.perCore ?? Number.NaN)),
  );
  return {
    variant,
    cpu: median(cpu),
    idleMb: gap((m) => m.restMb),
    loadMb: gap((m) => m.loadMb),
    errors: readings.reduce((sum, { saturation: [a, b] }) => sum + a.errors + b.errors, 0),
  };
}

/**
 * What the setting gives, from its own side (a shipped one: what leaving it out costs; a candidate: what adding it
 * saves): faster per CPU second, less memory at no CPU cost, or memory bought with CPU, a trade the docs decide
 * against the container's memory request (docs/performance.md).
 */
function verdict(row: Row): string {
  const cpu = row.variant.shipped ? row.cpu : 1 / row.cpu;
  const [loadMb, idleMb] = row.variant.shipped ? [row.loadMb, row.idleMb] : [-row.loadMb, -row.idleMb];
  const savings = [
    ...(loadMb >= MEMORY_WORTH_MB ? [`${loadMb.toFixed(0)} MB under load`] : []),
    ...(idleMb >= MEMORY_WORTH_MB ? [`${idleMb.toFixed(0)} MB at rest`] : []),
  ];
  const saves = savings.join(' and ');
  if (cpu >= CPU_WORTH) return row.variant.shipped ? 'pays: faster' : 'worth adding: faster';
  if (saves !== '' && cpu >= CPU_TOLERANCE)
    return `${row.variant.shipped ? 'pays' : 'worth adding'}: ${saves} at no CPU cost`;
  if (saves !== '') return `a trade: ${saves} for ${((1 - cpu) * 100).toFixed(1)} % CPU`;
  return row.variant.shipped ? 'does not pay' : 'not worth adding';
}

const ws = stack.workspaceUntilExit();
try {
  const gateway = await stack.startGateway();
  say(`node ${process.versions.node}; the image runs: node ${image.flags.join(' ')}, ${JSON.stringify(image.env)}`);
  say(
    `each comparison: ${PAIRS} fresh pairs, each read after 3 s at rest, then ${ROUNDS} rounds of ${SECONDS} s saturated with ${CONNECTIONS} connections, in turns\n`,
  );
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
