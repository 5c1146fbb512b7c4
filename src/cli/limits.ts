import { Registry } from 'prom-client';
import type { Config } from '../config/config.js';
import { collectConfig, readSecretFile } from '../config/load.js';
import { settingName } from '../config/schema.js';
import { ConfigError } from '../errors.js';
import { LimitGuard, type WindowFigures } from '../limits/guard.js';
import { limitRulesFromFile, type LimitRules } from '../limits/rules.js';
import { LimitMetrics } from '../observability/limit-metrics.js';
import { createLogger } from '../observability/log.js';
import { openStateStore } from '../state/open-store.js';
import { EXIT, type Command, type CommandIo } from '../tools/command.js';
import { parseCommandLine, runtimeFailure } from '../tools/usage.js';

const USAGE = 'usage: signing-sidecar limits [--json]';
const HELP = `${USAGE}

The money limits of SIDECAR_LIMITS_FILE (docs/limits.md), with the same settings as \`serve\`: each rule's mode,
its most per payment, and each window's use and what is left of it now. With SIDECAR_STATE_STORE=redis the use is
the fleet's, read from Redis; with the memory store it is the serving sidecar's in this pod, read from its admin
port (GET /limits, loopback only).

  --json   one JSON object per window instead of the table

Exit codes: 0 done, 1 a failure (the file refused, the store or the sidecar unreachable), 2 bad usage.
`;

/** How long the command waits for Redis or the sidecar's admin port before it gives up. */
const CONNECT_WAIT_MS = 5_000;

export const limits: Command = async (argv, io) => {
  const flags = parseCommandLine(argv, { json: { type: 'boolean', default: false } }, io, { usage: USAGE, help: HELP });
  if (typeof flags === 'number') return flags;
  const loaded = await collectConfig(io.env);
  if (!loaded.ok) {
    for (const err of loaded.errors) io.stderr.write(`error: ${err.message}\n`);
    return EXIT.failed;
  }
  const { config } = loaded;
  if (config.limitsFile === undefined) {
    io.stdout.write('no money limits: SIDECAR_LIMITS_FILE is not set\n');
    return EXIT.ok;
  }
  let rules: LimitRules;
  try {
    const setting = settingName('limitsFile');
    rules = limitRulesFromFile(config.signedRoutes)(
      setting,
      config.limitsFile,
      readSecretFile(setting, config.limitsFile),
    );
  } catch (err) {
    if (err instanceof ConfigError) return runtimeFailure(io, err.message);
    throw err;
  }
  let figures: readonly WindowFigures[];
  try {
    figures = config.state.store === 'redis' ? await fleetFigures(config, rules) : await podFigures(config);
  } catch (err) {
    return runtimeFailure(io, err instanceof Error ? err.message : 'the limits could not be read');
  }
  if (flags.json) {
    for (const row of figures) io.stdout.write(`${JSON.stringify(row)}\n`);
    return EXIT.ok;
  }
  printTable(io, rules, figures);
  return EXIT.ok;
};

/** The fleet's use, from Redis. */
async function fleetFigures(config: Config, rules: LimitRules): Promise<readonly WindowFigures[]> {
  const store = await openStateStore(config);
  try {
    if (!(await store.whenAvailable(CONNECT_WAIT_MS, true))) throw new Error('Redis is not reachable');
    const guard = new LimitGuard({
      store,
      now: Date.now,
      log: createLogger('silent'),
      metrics: new LimitMetrics(new Registry()),
    });
    guard.use(rules);
    return await guard.figures();
  } finally {
    await store.close();
  }
}

/** The memory store's use lives in the serving process: asked of its admin port, from inside the pod. */
async function podFigures(config: Config): Promise<readonly WindowFigures[]> {
  const url = `http://127.0.0.1:${config.admin.port}/limits`;
  const answer = await fetch(url, { signal: AbortSignal.timeout(CONNECT_WAIT_MS) }).catch(() => undefined);
  if (answer === undefined) throw new Error(`the sidecar's admin port does not answer at ${url}: is it running here?`);
  if (!answer.ok) throw new Error(`${url} answered ${answer.status}`);
  return ((await answer.json()) as { windows: WindowFigures[] }).windows;
}

function printTable(io: CommandIo, rules: LimitRules, figures: readonly WindowFigures[]): void {
  const rows = [['RULE', 'MODE', 'WINDOW', 'CURRENCY', 'USED', 'MAX', 'LEFT']];
  for (const rule of rules.rules) {
    if (rule.maxAmount !== undefined)
      rows.push([rule.name, rule.mode, 'payment', rule.currency ?? 'any', '-', rule.maxAmount, '-']);
    for (const row of figures.filter((f) => f.rule === rule.name))
      rows.push([row.rule, row.mode, row.window, row.currency ?? '(count)', row.used, row.max, row.left]);
  }
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  for (const row of rows)
    io.stdout.write(
      `${row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd()}\n`,
    );
}
