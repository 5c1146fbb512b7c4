// The money guardrails' rules (docs/limits.md): read from SIDECAR_LIMITS_FILE, YAML or JSON, checked whole before
// any of it is used. A refusal names the rule and the field; the file holds no secret, but never payload values.
import { createRequire } from 'node:module';
import type * as Yaml from 'yaml';
import { code as iso4217 } from 'currency-codes';
import { ConfigError } from '../errors.js';
import { limitInMinorUnits } from './amount.js';

export type LimitMode = 'enforce' | 'report';

/** A total over a rolling period, or a count of payments over one. */
export interface LimitWindow {
  /** As written in the file ("1h"), or `per_minute` for maxPerMinute: the `window` label and the answer's field. */
  readonly label: string;
  readonly periodMs: number;
  /** The most the payments of one currency may add up to within the period (decimal text); or: */
  readonly maxTotal?: string;
  /** the most payments (of every currency) within the period. */
  readonly maxCount?: number;
}

export interface LimitRule {
  readonly name: string;
  /** The signed route it covers (e.g. /api/v2/transfer-out/init). */
  readonly route: string;
  /** The one currency it covers; every currency when absent (amounts are then counted per currency). */
  readonly currency?: string;
  /** RFC 6901 JSON pointers into the payload, as reference tokens. */
  readonly amountField: readonly string[];
  readonly currencyField: readonly string[];
  readonly amountFieldText: string;
  readonly currencyFieldText: string;
  /** The most one payment may be (decimal text). */
  readonly maxAmount?: string;
  readonly windows: readonly LimitWindow[];
  readonly mode: LimitMode;
}

export interface LimitRules {
  readonly rules: readonly LimitRule[];
  /** Places of a currency: ISO 4217's, or the file's `minorUnits` for codes outside it (USDT: 6). */
  readonly exponentOf: (currency: string) => number | undefined;
}

/** Said by `serve` and `check` when rules meet the memory store. */
export const MEMORY_STORE_WARNING =
  'the memory store counts each replica alone: a fleet of N lets N times each limit through (SIDECAR_STATE_STORE=redis shares them)';

export const NO_LIMITS: LimitRules = { rules: [], exponentOf: () => undefined };

/** Rule names are metric labels and log fields: short, plain. */
const RULE_NAME = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
/** ISO 4217 codes and the like (USDT): what a `currency` field may hold. */
export const CURRENCY_CODE = /^[A-Z][A-Z0-9]{2,9}$/;
const PERIOD = /^([1-9][0-9]{0,4})(s|m|h|d)$/;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const MIN_PERIOD_MS = 60_000;
export const MAX_PERIOD_MS = 31 * 86_400_000;
/** The count window of maxPerMinute. */
const PER_MINUTE = { label: 'per_minute', periodMs: 60_000 } as const;

const RULE_FIELDS = new Set([
  'name',
  'route',
  'currency',
  'amountField',
  'currencyField',
  'maxAmount',
  'windows',
  'maxPerMinute',
  'mode',
]);

/** Why a rules file is refused: the path in the file, and what is wrong there. */
export class LimitRulesError extends Error {
  override readonly name = 'LimitRulesError';
}

const requireOnDemand = createRequire(import.meta.url);

/**
 * The rules of a file's text; `routes` are the signed routes a rule may name (a typo must not leave a route
 * unguarded). Throws LimitRulesError naming the first problem.
 */
export function parseLimitRules(text: string, routes: readonly string[]): LimitRules {
  let document: unknown;
  try {
    // YAML 1.2 is a superset of JSON: one parser for both. Loaded only when a rules file is configured.
    document = (requireOnDemand('yaml') as typeof Yaml).parse(text);
  } catch (err) {
    const line = (err as { linePos?: { line: number }[] }).linePos?.[0]?.line;
    throw new LimitRulesError(`syntax error${line === undefined ? '' : ` at line ${line}`} (not valid JSON or YAML)`);
  }
  const top = objectAt(document, 'the file');
  for (const key of Object.keys(top))
    if (key !== 'rules' && key !== 'minorUnits') throw new LimitRulesError(`unknown field "${key}" at the top`);
  const extraExponents = minorUnitsOf(top.minorUnits);
  const exponentOf = (currency: string): number | undefined =>
    extraExponents.get(currency) ?? iso4217(currency)?.digits;
  if (!Array.isArray(top.rules)) throw new LimitRulesError('"rules" must be a list');
  const names = new Set<string>();
  const rules = top.rules.map((entry, index) => {
    const rule = parseRule(entry, `rules[${index}]`, routes, exponentOf);
    if (names.has(rule.name)) throw new LimitRulesError(`rules[${index}]: the name "${rule.name}" is used twice`);
    names.add(rule.name);
    return rule;
  });
  return { rules, exponentOf };
}

function parseRule(
  entry: unknown,
  at: string,
  routes: readonly string[],
  exponentOf: (currency: string) => number | undefined,
): LimitRule {
  const raw = objectAt(entry, at);
  for (const key of Object.keys(raw))
    if (!RULE_FIELDS.has(key)) throw new LimitRulesError(`${at}: unknown field "${key}"`);
  const name = stringAt(raw.name, `${at}.name`);
  if (!RULE_NAME.test(name))
    throw new LimitRulesError(`${at}.name: 1 to 64 of a-z, 0-9, "_", "." and "-", starting with a letter or digit`);
  const where = `rule "${name}"`;
  const route = stringAt(raw.route, `${where}: route`);
  if (!routes.includes(route))
    throw new LimitRulesError(`${where}: route ${route} is not a signed route (${routes.join(', ')})`);
  const currency = raw.currency === undefined ? undefined : stringAt(raw.currency, `${where}: currency`);
  if (currency !== undefined && exponentOf(currency) === undefined)
    throw new LimitRulesError(`${where}: currency ${currency} is not in ISO 4217; give its places under minorUnits`);
  const amountFieldText =
    raw.amountField === undefined ? '/amount' : stringAt(raw.amountField, `${where}: amountField`);
  const currencyFieldText =
    raw.currencyField === undefined ? '/currency' : stringAt(raw.currencyField, `${where}: currencyField`);
  const maxAmount =
    raw.maxAmount === undefined ? undefined : decimalAt(raw.maxAmount, `${where}: maxAmount`, currency, exponentOf);
  const windows = windowsAt(raw.windows, where, currency, exponentOf);
  if (raw.maxPerMinute !== undefined) {
    const maxCount = raw.maxPerMinute;
    if (typeof maxCount !== 'number' || !Number.isSafeInteger(maxCount) || maxCount < 1)
      throw new LimitRulesError(`${where}: maxPerMinute must be a whole number of at least 1`);
    windows.push({ ...PER_MINUTE, maxCount });
  }
  if (maxAmount === undefined && windows.length === 0)
    throw new LimitRulesError(`${where}: limits nothing: give maxAmount, windows or maxPerMinute`);
  const mode = raw.mode ?? 'enforce';
  if (mode !== 'enforce' && mode !== 'report') throw new LimitRulesError(`${where}: mode must be enforce or report`);
  return {
    name,
    route,
    ...(currency === undefined ? {} : { currency }),
    amountField: jsonPointer(amountFieldText, `${where}: amountField`),
    currencyField: jsonPointer(currencyFieldText, `${where}: currencyField`),
    amountFieldText,
    currencyFieldText,
    ...(maxAmount === undefined ? {} : { maxAmount }),
    windows,
    mode,
  };
}

function windowsAt(
  value: unknown,
  where: string,
  currency: string | undefined,
  exponentOf: (currency: string) => number | undefined,
): LimitWindow[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new LimitRulesError(`${where}: windows must be a list`);
  const seen = new Set<number>();
  return value.map((entry, index) => {
    const at = `${where}: windows[${index}]`;
    const raw = objectAt(entry, at);
    for (const key of Object.keys(raw))
      if (key !== 'period' && key !== 'maxTotal') throw new LimitRulesError(`${at}: unknown field "${key}"`);
    const label = stringAt(raw.period, `${at}.period`);
    const match = PERIOD.exec(label);
    const periodMs = match === null ? NaN : Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
    if (!(periodMs >= MIN_PERIOD_MS && periodMs <= MAX_PERIOD_MS))
      throw new LimitRulesError(`${at}.period: a duration such as 1h or 24h, from 1m to 31d`);
    if (seen.has(periodMs)) throw new LimitRulesError(`${at}.period: two windows of ${label}`);
    seen.add(periodMs);
    return { label, periodMs, maxTotal: decimalAt(raw.maxTotal, `${at}.maxTotal`, currency, exponentOf) };
  });
}

/** A limit: a plain decimal string (a YAML number would be a float), checked against the rule's currency if any. */
function decimalAt(
  value: unknown,
  at: string,
  currency: string | undefined,
  exponentOf: (currency: string) => number | undefined,
): string {
  if (typeof value !== 'string')
    throw new LimitRulesError(`${at}: a decimal in quotes, such as "5000.00" (a bare number would be a float)`);
  try {
    const minor = limitInMinorUnits(value, currency === undefined ? 0 : (exponentOf(currency) ?? 0));
    if (currency !== undefined && minor === 0n) throw new Error('rounds to nothing in its currency');
  } catch (err) {
    throw new LimitRulesError(`${at}: ${(err as Error).message}`);
  }
  return value;
}

function minorUnitsOf(value: unknown): ReadonlyMap<string, number> {
  if (value === undefined) return new Map();
  const raw = objectAt(value, 'minorUnits');
  return new Map(
    Object.entries(raw).map(([currency, places]) => {
      if (!CURRENCY_CODE.test(currency)) throw new LimitRulesError(`minorUnits: "${currency}" is not a currency code`);
      if (typeof places !== 'number' || !Number.isInteger(places) || places < 0 || places > 18)
        throw new LimitRulesError(`minorUnits.${currency}: the number of decimal places, 0 to 18`);
      return [currency, places];
    }),
  );
}

/** RFC 6901: "/a/b~1c" is ["a", "b/c"]; the empty pointer (the whole payload) is no field. */
function jsonPointer(text: string, at: string): readonly string[] {
  if (!text.startsWith('/')) throw new LimitRulesError(`${at}: a JSON pointer such as /amount`);
  return text
    .slice(1)
    .split('/')
    .map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'));
}

function objectAt(value: unknown, at: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new LimitRulesError(`${at} must be a mapping`);
  return value as Record<string, unknown>;
}

function stringAt(value: unknown, at: string): string {
  if (typeof value !== 'string' || value === '') throw new LimitRulesError(`${at} must be a non-empty string`);
  return value;
}

/**
 * The rules file's parser as config and the file watcher want it: a refusal is a ConfigError naming the setting and
 * the file, never its content.
 */
export function limitRulesFromFile(routes: readonly string[]) {
  return (setting: string, file: string, text: string): LimitRules => {
    try {
      return parseLimitRules(text, routes);
    } catch (err) {
      if (err instanceof LimitRulesError) throw new ConfigError(setting, `${file}: ${err.message}`);
      throw err;
    }
  };
}
