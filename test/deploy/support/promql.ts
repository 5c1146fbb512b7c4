// Just enough PromQL reading to list the series an expression selects: metric names and label matchers.
// promtool checks the syntax; this only has to find names in expressions that are already valid.

export interface Matcher {
  readonly label: string;
  readonly op: '=' | '!=' | '=~' | '!~';
  readonly value: string;
}

export interface Selector {
  readonly metric: string;
  readonly matchers: readonly Matcher[];
}

const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'and',
  'or',
  'unless',
  'offset',
]);
const IDENT = /(?<![\w.$:])([a-zA-Z_:][\w:]*)(\s*\{([^}]*)\})?/g;
const MATCHER = /([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g;

/** Every metric selector of a PromQL expression (Grafana variables such as $pod are left in values). */
export function selectors(expr: string): Selector[] {
  // Grouping label lists, range/offset durations and Grafana variables name no metrics.
  const text = expr
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\$\w+/g, ' ');
  const found: Selector[] = [];
  for (const match of text.matchAll(IDENT)) {
    const [, name = '', braces, body = ''] = match;
    const rest = text.slice((match.index ?? 0) + match[0].length);
    if (braces === undefined && (/^\s*\(/.test(rest) || KEYWORDS.has(name))) continue; // a function or keyword
    const matchers: Matcher[] = [...body.matchAll(MATCHER)].map(([, label = '', op, value = '']) => ({
      label,
      op: op as Matcher['op'],
      value,
    }));
    found.push({ metric: name, matchers });
  }
  return found;
}

/** Grafana `label_values(selector, label)`: the selector part as PromQL. */
export function labelValuesSelector(query: string): string {
  const m = /^\s*label_values\((.*),\s*\w+\s*\)\s*$/.exec(query);
  if (!m?.[1]) throw new Error(`unsupported template query: ${query}`);
  return m[1];
}

/** The values a matcher accepts when it is an equality or an alternation of literals ("a|b"). */
export function literalValues(m: Matcher): string[] {
  if (m.op === '=') return [m.value];
  if (m.op === '=~' && /^[\w.|-]+$/.test(m.value.replace(/\\\./g, '.')))
    return m.value.replace(/\\\./g, '.').split('|');
  return [];
}

export interface Exposition {
  /** Sample names (histograms' _bucket/_sum/_count included) mapped to their label names and values. */
  readonly series: Map<string, Map<string, Set<string>>>;
}

/** Parses the Prometheus text format: `# TYPE` lines and samples, so metrics without samples still count. */
export function parseExposition(text: string): Exposition {
  const series = new Map<string, Map<string, Set<string>>>();
  const entry = (name: string) => {
    let labels = series.get(name);
    if (!labels) series.set(name, (labels = new Map<string, Set<string>>()));
    return labels;
  };
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\w+)/.exec(line);
    if (type?.[1]) {
      const names = type[2] === 'histogram' ? ['_bucket', '_sum', '_count'].map((s) => type[1] + s) : [type[1]];
      names.forEach(entry);
      continue;
    }
    const sample = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s/.exec(line);
    if (!sample?.[1]) continue;
    const labels = entry(sample[1]);
    for (const [, label = '', value = ''] of (sample[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      let values = labels.get(label);
      if (!values) labels.set(label, (values = new Set<string>()));
      values.add(value);
    }
  }
  return { series };
}
