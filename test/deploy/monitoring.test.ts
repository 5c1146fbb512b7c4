// Alerts and dashboard: promtool accepts the rules, and every query names series that a running sidecar
// (started against the simulator, one signed deposit sent) really exports.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { scrapeLiveSidecar, type Scrape } from './support/live-sidecar.js';
import { labelValuesSelector, literalValues, parseExposition, selectors, type Exposition } from './support/promql.js';
import { DEPLOY_DIR, REPO_ROOT, SIDECAR_CONTAINER, only, render } from './support/render.js';

/** Sections of docs/runbooks.md the alerts link to ("Runbook: ..." headings). */
export const RUNBOOK_ANCHORS = [
  'runbook-signature-verification-failures',
  'runbook-nonce-replays',
  'runbook-clock-skew',
  'runbook-ip-forbidden',
  'runbook-token-failures',
  'runbook-sidecar-not-ready',
  'runbook-memory-pressure',
  'runbook-gateway-latency',
  'runbook-answer-mismatches',
  'runbook-config-reload-failures',
  'runbook-signer-failing',
  'runbook-postback-signature-failures',
  'runbook-postback-delivery-failures',
  'runbook-postback-backlog-aging',
  'runbook-postback-dead-letters',
  'runbook-state-store-down',
  'runbook-state-store-near-its-limit',
  'runbook-state-store-wiped',
  'runbook-state-store-evicting',
  'runbook-a-redis-failover',
  'runbook-state-records-rejected',
  'runbook-a-limit-stopped-payments',
] as const;
/** Labels that Prometheus (PodMonitor relabelling) adds to every scraped series. */
const TARGET_LABELS = new Set(['namespace', 'pod', 'container', 'job', 'instance', 'endpoint']);
/** Series that Prometheus itself makes for each target. */
const PROMETHEUS_SERIES = new Set(['up']);

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

const rules = only(render('base').prometheusRules, 'PrometheusRule').spec?.groups ?? [];
const alerts: Rule[] = rules.flatMap((g) => (g.rules ?? []) as Rule[]);
let scrape: Scrape;
let exposition: Exposition;

before(async () => {
  scrape = await scrapeLiveSidecar();
  exposition = parseExposition(scrape.metricsText);
});

describe('the live sidecar behind the checks', () => {
  test('answered the signed deposit and its probes', () => {
    assert.equal(scrape.depositStatus < 300, true, `deposit: ${scrape.depositStatus} ${scrape.depositBody}`);
    assert.deepEqual(scrape.probes, { '/livez': 200, '/readyz': 200, '/startupz': 200, '/healthz/token': 200 });
  });
});

describe('PrometheusRule', () => {
  test('promtool check rules accepts the rules', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deploy-rules-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'rules.yaml');
    writeFileSync(file, stringify({ groups: rules }));
    let out: string;
    try {
      out = execFileSync('promtool', ['check', 'rules', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { stdout?: string; stderr?: string };
      if (e.code === 'ENOENT') assert.fail('promtool not found: `apt-get install -y prometheus` (.ci/run installs it)');
      assert.fail(`promtool rejected the rules:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
    }
    assert.match(out, new RegExp(`SUCCESS: ${alerts.length} rules found`));
  });

  test('promtool test rules: alerts fire on a single event from a series created at zero, and stay quiet when idle', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deploy-rules-test-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: rules }));
    const pod = 'namespace="payments", pod="p-1"';
    const requests = (code: string) =>
      `signing_sidecar_requests_total{${pod}, route="/api/v2/transaction/init", status_class="5xx", code="${code}"}`;
    // promtool compares annotations too: render the rule's templates for the values this test feeds in.
    const annotations = (alertname: string, value: string) =>
      Object.fromEntries(
        Object.entries(alerts.find((a) => a.alert === alertname)?.annotations ?? {}).map(([k, v]) => [
          k,
          v
            .replaceAll('{{ $labels.namespace }}', 'payments')
            .replaceAll('{{ $labels.pod }}', 'p-1')
            .replaceAll('{{ $labels.setting }}', 'private_key')
            .replaceAll('{{ $labels.kind }}', 'postback')
            .replaceAll('{{ $labels.rule }}', 'withdrawals-usd')
            .replaceAll('{{ $labels.window }}', '1h')
            .replaceAll('{{ $value | humanize }}', value)
            .replaceAll('{{ $value | humanizePercentage }}', value)
            .replaceAll('{{ $value | humanizeDuration }}', value),
        ]),
      );
    interface AlertTest {
      eval_time: string;
      alertname: string;
      exp_alerts: Array<{ exp_labels: Record<string, string>; exp_annotations: Record<string, string> }>;
    }
    const firing = (alertname: string, value: string, evalTime = '10m', severity = 'warning'): AlertTest => ({
      eval_time: evalTime,
      alertname,
      exp_alerts: [
        {
          exp_labels: { severity, namespace: 'payments', pod: 'p-1' },
          exp_annotations: annotations(alertname, value),
        },
      ],
    });
    const quiet = (alertname: string): AlertTest => ({ eval_time: '10m', alertname, exp_alerts: [] });
    // The inbox alerts watch the account's figures, which every replica reports alike: one alert per namespace.
    const accountFiring = (alertname: string, value: string, evalTime: string, severity: string): AlertTest => ({
      eval_time: evalTime,
      alertname,
      exp_alerts: [
        {
          exp_labels: { severity, namespace: 'payments' },
          exp_annotations: annotations(alertname, value),
        },
      ],
    });
    const replicas = (metric: string, values: string) =>
      ['p-1', 'p-2'].map((name) => ({ series: `${metric}{namespace="payments", pod="${name}"}`, values }));
    // The reload alert keeps the setting label (which file was refused).
    const reloadAlertLabels = { severity: 'warning', namespace: 'payments', pod: 'p-1', setting: 'private_key' };
    const tests = [
      {
        // One outcome_unknown after a quiet start: the zero-created series makes increase() see it.
        interval: '1m',
        input_series: [{ series: requests('sidecar.upstream.outcome_unknown'), values: '0x5 1x10' }],
        alert_rule_test: [firing('SigningSidecarOutcomeUnknown', '1')],
      },
      {
        interval: '1m',
        input_series: [{ series: requests('sidecar.upstream.outcome_unknown'), values: '0x15' }],
        alert_rule_test: [quiet('SigningSidecarOutcomeUnknown')],
      },
      {
        // One stray answer refused after a quiet start: the counter is exported at zero from the start.
        interval: '1m',
        input_series: [{ series: `signing_sidecar_answer_mismatches_total{${pod}}`, values: '0x5 1x10' }],
        alert_rule_test: [firing('SigningSidecarAnswerMismatch', '1')],
      },
      {
        // Gateway 3 s behind the local clock (our timestamps look 3 s ahead; the gateway refuses at 5 s).
        interval: '1m',
        input_series: [{ series: `signing_sidecar_gateway_clock_skew_seconds{${pod}}`, values: '-3x15' }],
        alert_rule_test: [firing('SigningSidecarClockSkewHigh', '-3', '15m')],
      },
      {
        // Gateway 10 s ahead: our timestamps look 10 s old, well inside the 60 s tolerance.
        interval: '1m',
        input_series: [{ series: `signing_sidecar_gateway_clock_skew_seconds{${pod}}`, values: '10x15' }],
        alert_rule_test: [{ eval_time: '15m', alertname: 'SigningSidecarClockSkewHigh', exp_alerts: [] }],
      },
    ];
    tests.push(
      {
        // A token outage: the sidecar still serves (ready 1, the pod stays in its Service) and holds no token
        // (expiry gauge at 0). The token alert reports it; the readiness alert does not.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_access_token_expiry_timestamp_seconds{${pod}}`, values: '0x15' },
          { series: `signing_sidecar_ready{${pod}}`, values: '1x15' },
        ],
        alert_rule_test: [
          firing('SigningSidecarAccessTokenExpiring', '', '10m', 'critical'),
          quiet('SigningSidecarNotReady'),
        ],
      },
      {
        // One rotated key file refused (half-written): the series exists at zero from the start, so it fires.
        interval: '1m',
        input_series: [
          {
            series: `signing_sidecar_config_reloads_total{${pod}, setting="private_key", outcome="error"}`,
            values: '0x5 1x10',
          },
          {
            series: `signing_sidecar_config_reloads_total{${pod}, setting="private_key", outcome="success"}`,
            values: '0x15',
          },
        ],
        alert_rule_test: [
          {
            eval_time: '10m',
            alertname: 'SigningSidecarConfigReloadFailed',
            exp_alerts: [
              {
                exp_labels: reloadAlertLabels,
                exp_annotations: annotations('SigningSidecarConfigReloadFailed', '1'),
              },
            ],
          },
        ],
      },
      {
        // Successful rotations only: quiet.
        interval: '1m',
        input_series: [
          {
            series: `signing_sidecar_config_reloads_total{${pod}, setting="private_key", outcome="success"}`,
            values: '0x5 1x10',
          },
          {
            series: `signing_sidecar_config_reloads_total{${pod}, setting="private_key", outcome="error"}`,
            values: '0x15',
          },
        ],
        alert_rule_test: [quiet('SigningSidecarConfigReloadFailed')],
      },
      {
        // Redis away for longer than a restart takes: fires once the 2 minutes have passed.
        interval: '1m',
        input_series: [{ series: `signing_sidecar_state_store_up{${pod}}`, values: '1x3 0x12' }],
        alert_rule_test: [firing('SigningSidecarStateStoreDown', '0', '10m', 'critical')],
      },
      {
        // The memory store full: live entries evicted after a quiet start (the counter exists at 0).
        interval: '1m',
        input_series: [{ series: `signing_sidecar_state_store_evictions_total{${pod}}`, values: '0x5 40x10' }],
        alert_rule_test: [firing('SigningSidecarStateStoreEvicting', '40')],
      },
      {
        // Never full: quiet.
        interval: '1m',
        input_series: [{ series: `signing_sidecar_state_store_evictions_total{${pod}}`, values: '0x15' }],
        alert_rule_test: [quiet('SigningSidecarStateStoreEvicting')],
      },
      {
        // One postback written under the prefix without a valid MAC, refused: the series exist at zero, so it fires.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_state_records_rejected_total{${pod}, kind="postback"}`, values: '0x5 1x10' },
          { series: `signing_sidecar_state_records_rejected_total{${pod}, kind="idempotency"}`, values: '0x15' },
        ],
        alert_rule_test: [
          {
            eval_time: '10m',
            alertname: 'SigningSidecarStateRecordsRejected',
            exp_alerts: [
              {
                exp_labels: { severity: 'critical', namespace: 'payments', pod: 'p-1', kind: 'postback' },
                exp_annotations: annotations('SigningSidecarStateRecordsRejected', '1'),
              },
            ],
          },
        ],
      },
      {
        // Every record verified: quiet.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_state_records_rejected_total{${pod}, kind="postback"}`, values: '0x15' },
          { series: `signing_sidecar_state_records_rejected_total{${pod}, kind="idempotency"}`, values: '0x15' },
        ],
        alert_rule_test: [quiet('SigningSidecarStateRecordsRejected')],
      },
      {
        // The memory store at 90 % of its bytes from minute 5 (its entries at 10 %): fires 10 minutes later.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_state_store_memory_bytes{${pod}}`, values: '500x4 900x20' },
          { series: `signing_sidecar_state_store_memory_limit_bytes{${pod}}`, values: '1000x24' },
          { series: `signing_sidecar_state_store_memory_entries{${pod}}`, values: '10x24' },
          { series: `signing_sidecar_state_store_memory_limit_entries{${pod}}`, values: '100x24' },
        ],
        alert_rule_test: [
          { eval_time: '14m', alertname: 'SigningSidecarStateStoreNearLimit', exp_alerts: [] },
          firing('SigningSidecarStateStoreNearLimit', '90%', '15m'),
        ],
      },
      {
        // Its entries at 85 % (small postback records), its bytes at 10 %: fires too.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_state_store_memory_bytes{${pod}}`, values: '100x20' },
          { series: `signing_sidecar_state_store_memory_limit_bytes{${pod}}`, values: '1000x20' },
          { series: `signing_sidecar_state_store_memory_entries{${pod}}`, values: '85x20' },
          { series: `signing_sidecar_state_store_memory_limit_entries{${pod}}`, values: '100x20' },
        ],
        alert_rule_test: [firing('SigningSidecarStateStoreNearLimit', '85%', '15m')],
      },
      {
        // At 70 %, or with Redis (every figure 0): quiet.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_state_store_memory_bytes{${pod}}`, values: '700x20' },
          { series: `signing_sidecar_state_store_memory_limit_bytes{${pod}}`, values: '1000x20' },
          { series: `signing_sidecar_state_store_memory_entries{namespace="payments", pod="p-2"}`, values: '0x20' },
          {
            series: `signing_sidecar_state_store_memory_limit_entries{namespace="payments", pod="p-2"}`,
            values: '0x20',
          },
        ],
        alert_rule_test: [{ eval_time: '20m', alertname: 'SigningSidecarStateStoreNearLimit', exp_alerts: [] }],
      },
      {
        // Redis wiped at minute 5, noticed by both replicas: one critical alert for the namespace at once, still
        // firing 50 minutes on, gone once the hour has passed.
        interval: '1m',
        input_series: replicas('signing_sidecar_state_store_wipes_total', '0x5 1x70'),
        alert_rule_test: [
          { eval_time: '4m', alertname: 'SigningSidecarStateStoreWiped', exp_alerts: [] },
          accountFiring('SigningSidecarStateStoreWiped', '2', '6m', 'critical'),
          accountFiring('SigningSidecarStateStoreWiped', '2', '55m', 'critical'),
          { eval_time: '70m', alertname: 'SigningSidecarStateStoreWiped', exp_alerts: [] },
        ],
      },
      {
        // Never wiped (or the memory store): quiet.
        interval: '1m',
        input_series: replicas('signing_sidecar_state_store_wipes_total', '0x70'),
        alert_rule_test: [{ eval_time: '70m', alertname: 'SigningSidecarStateStoreWiped', exp_alerts: [] }],
      },
      {
        // A Redis restart (one minute down): quiet.
        interval: '1m',
        input_series: [{ series: `signing_sidecar_state_store_up{${pod}}`, values: '1x5 0 1x9' }],
        alert_rule_test: [quiet('SigningSidecarStateStoreDown')],
      },
      {
        // One forged postback after a quiet start: the outcome series exist at zero from the start.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="signature_invalid"}`, values: '0x5 1x10' },
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="forwarded"}`, values: '0x5 10x10' },
        ],
        alert_rule_test: [firing('SigningSidecarPostbackSignatureInvalid', '1')],
      },
      {
        // Genuine postbacks only: quiet.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="signature_invalid"}`, values: '0x15' },
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="forwarded"}`, values: '0+3x15' },
        ],
        alert_rule_test: [quiet('SigningSidecarPostbackSignatureInvalid')],
      },
      {
        // The application's webhook failing for 15 minutes (one failed forward a minute): fires after 10.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="forward_failed"}`, values: '0x2 1+1x20' },
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="store_unavailable"}`, values: '0x22' },
        ],
        alert_rule_test: [firing('SigningSidecarPostbackDeliveryFailing', '5', '18m')],
      },
      {
        // One failed forward that the gateway's redelivery healed: quiet.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="forward_failed"}`, values: '0x5 1x15' },
          { series: `signing_sidecar_postbacks_total{${pod}, outcome="store_unavailable"}`, values: '0x20' },
        ],
        alert_rule_test: [quiet('SigningSidecarPostbackDeliveryFailing')],
      },
      {
        // The application down since minute 4: the oldest postback ages one minute per minute, on both replicas (p-2
        // scraped 30 s earlier). Past 15 minutes from minute 20, firing from minute 25 with the larger figure.
        interval: '1m',
        input_series: [
          { series: `signing_sidecar_postback_inbox_oldest_age_seconds{${pod}}`, values: '0x4 60+60x25' },
          {
            series: `signing_sidecar_postback_inbox_oldest_age_seconds{namespace="payments", pod="p-2"}`,
            values: '0x4 30+60x25',
          },
        ],
        alert_rule_test: [
          { eval_time: '24m', alertname: 'SigningSidecarPostbackBacklogAging', exp_alerts: [] },
          accountFiring('SigningSidecarPostbackBacklogAging', '21m 0s', '25m', 'warning'),
        ],
      },
      {
        // A backlog that drains after 14 minutes: quiet. Summed over the two replicas it would be over 15 minutes
        // from minute 12 and fire at minute 17.
        interval: '1m',
        input_series: replicas('signing_sidecar_postback_inbox_oldest_age_seconds', '0x4 60+60x13 0x12'),
        alert_rule_test: [{ eval_time: '18m', alertname: 'SigningSidecarPostbackBacklogAging', exp_alerts: [] }],
      },
      {
        // Two postbacks moved to the dead letters at minute 5, reported by both replicas: fires at once with 2.
        interval: '1m',
        input_series: replicas('signing_sidecar_postback_dead_letters', '0x5 2x10'),
        alert_rule_test: [
          { eval_time: '4m', alertname: 'SigningSidecarPostbackDeadLetters', exp_alerts: [] },
          accountFiring('SigningSidecarPostbackDeadLetters', '2', '6m', 'critical'),
        ],
      },
      {
        // A dead letter replayed (or dropped) two minutes later: quiet again.
        interval: '1m',
        input_series: replicas('signing_sidecar_postback_dead_letters', '0x5 1x2 0x8'),
        alert_rule_test: [quiet('SigningSidecarPostbackDeadLetters')],
      },
      {
        // One payment refused by an enforced limit, on one of two replicas: one alert per rule, at once.
        interval: '1m',
        input_series: ['p-1', 'p-2'].map((name, i) => ({
          series: `signing_sidecar_limit_refusals_total{namespace="payments", pod="${name}", rule="withdrawals-usd", mode="enforce"}`,
          values: i === 0 ? '0x5 1x10' : '0x15',
        })),
        alert_rule_test: [
          {
            eval_time: '7m',
            alertname: 'SigningSidecarLimitRefusing',
            exp_alerts: [
              {
                exp_labels: { severity: 'critical', namespace: 'payments', rule: 'withdrawals-usd' },
                exp_annotations: annotations('SigningSidecarLimitRefusing', '1'),
              },
            ],
          },
          { eval_time: '14m', alertname: 'SigningSidecarLimitRefusing', exp_alerts: [] },
          { eval_time: '7m', alertname: 'SigningSidecarLimitWouldRefuse', exp_alerts: [] },
        ],
      },
      {
        // A window filling up: 70 % is quiet, 85 % for a minute fires, reported alike by both replicas.
        interval: '1m',
        input_series: ['p-1', 'p-2'].map((name) => ({
          series: `signing_sidecar_limit_use_ratio{namespace="payments", pod="${name}", rule="withdrawals-usd", window="1h"}`,
          values: '0.7x5 0.85x10',
        })),
        alert_rule_test: [
          { eval_time: '5m', alertname: 'SigningSidecarLimitNearlyUsed', exp_alerts: [] },
          {
            eval_time: '8m',
            alertname: 'SigningSidecarLimitNearlyUsed',
            exp_alerts: [
              {
                exp_labels: { severity: 'warning', namespace: 'payments', rule: 'withdrawals-usd', window: '1h' },
                exp_annotations: annotations('SigningSidecarLimitNearlyUsed', '85%'),
              },
            ],
          },
        ],
      },
      {
        // Not serving (stuck draining) for more than 5 minutes.
        interval: '1m',
        input_series: [{ series: `signing_sidecar_ready{${pod}}`, values: '1x3 0x12' }],
        alert_rule_test: [firing('SigningSidecarNotReady', '0', '10m', 'critical')],
      },
    );
    writeFileSync(join(dir, 'tests.yaml'), stringify({ rule_files: ['rules.yaml'], evaluation_interval: '1m', tests }));
    try {
      execFileSync('promtool', ['test', 'rules', join(dir, 'tests.yaml')], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { stdout?: string; stderr?: string };
      if (e.code === 'ENOENT') assert.fail('promtool not found: `apt-get install -y prometheus` (.ci/run installs it)');
      assert.fail(`promtool test rules failed:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
    }
  });

  test('the series those alerts watch exist at zero in a live scrape, before any failure', () => {
    for (const code of ['sidecar.upstream.outcome_unknown', 'sidecar.upstream.unreachable']) {
      assert.match(
        scrape.metricsText,
        new RegExp(
          `signing_sidecar_requests_total\\{route="/api/v2/transaction/init",status_class="5xx",code="${code.replace(/\./g, '\\.')}"\\} 0`,
        ),
      );
    }
  });

  test('covers what on-call acts on', () => {
    const names = alerts.map((a) => a.alert ?? '');
    for (const alert of [
      'SigningSidecarSignatureVerifyFailed',
      'SigningSidecarNonceReplayed',
      'SigningSidecarTimestampRejected',
      'SigningSidecarClockSkewHigh',
      'SigningSidecarTokenRejected',
      'SigningSidecarAccessTokenExpiring',
      'SigningSidecarNotReady',
      'SigningSidecarDown',
      'SigningSidecarGatewayLatencyHigh',
      'SigningSidecarStateStoreDown',
      'SigningSidecarStateStoreNearLimit',
      'SigningSidecarStateStoreEvicting',
      'SigningSidecarStateRecordsRejected',
      'SigningSidecarStateStoreWiped',
      'SigningSidecarPostbackSignatureInvalid',
      'SigningSidecarPostbackDeliveryFailing',
      'SigningSidecarPostbackBacklogAging',
      'SigningSidecarPostbackDeadLetters',
    ]) {
      assert.ok(names.includes(alert), `${alert} missing`);
    }
  });

  test('every alert has a severity, a summary, a description and a runbook section', () => {
    for (const rule of alerts) {
      assert.ok(rule.alert, 'alerting rules only');
      assert.ok(['critical', 'warning'].includes(rule.labels?.severity ?? ''), `${rule.alert}: severity`);
      assert.ok(rule.annotations?.summary && rule.annotations.description, `${rule.alert}: summary and description`);
      const anchor = /^docs\/runbooks\.md#(.+)$/.exec(rule.annotations.runbook_url ?? '')?.[1];
      assert.ok(
        anchor && (RUNBOOK_ANCHORS as readonly string[]).includes(anchor),
        `${rule.alert}: runbook_url ${rule.annotations.runbook_url}`,
      );
    }
  });

  test('docs/runbooks.md has every runbook section the alerts link to', () => {
    const file = `${REPO_ROOT}docs/runbooks.md`;
    const readme = existsSync(file) ? readFileSync(file, 'utf8') : '';
    const anchors = new Set([...readme.matchAll(/^#{1,6}\s+(.+)$/gm)].map(([, h = '']) => githubAnchor(h)));
    for (const anchor of RUNBOOK_ANCHORS)
      assert.ok(anchors.has(anchor), `docs/runbooks.md has no heading for #${anchor}`);
  });

  test('every alert expression selects series the sidecar exports', () => {
    for (const rule of alerts) checkQuery(rule.expr, `alert ${rule.alert}`);
  });
});

describe('Grafana dashboard', () => {
  interface Target {
    expr?: string;
  }
  interface Panel {
    title?: string;
    type?: string;
    targets?: Target[];
    panels?: Panel[];
    datasource?: { uid?: string };
  }
  interface Dashboard {
    uid?: string;
    title?: string;
    panels?: Panel[];
    templating?: { list?: Array<{ name: string; query?: unknown }> };
  }
  const file = `${DEPLOY_DIR}base/dashboards/signing-sidecar.json`;
  const dashboard = JSON.parse(readFileSync(file, 'utf8')) as Dashboard;
  const panels = (dashboard.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== 'row');

  test('is importable: uid, title, a data source variable, queries on every panel', () => {
    assert.equal(dashboard.uid, 'signing-sidecar');
    assert.ok(dashboard.title);
    assert.ok(dashboard.templating?.list?.some((v) => v.name === 'datasource'));
    assert.ok(panels.length >= 10);
    for (const panel of panels) {
      assert.ok((panel.targets ?? []).length > 0 && panel.targets?.every((t) => t.expr), `${panel.title}: queries`);
      assert.equal(panel.datasource?.uid, '${datasource}', `${panel.title}: uses the data source variable`);
    }
  });

  test('panel ids are unique and panels do not overlap', () => {
    interface Placed {
      id?: number;
      title?: string;
      gridPos?: { h: number; w: number; x: number; y: number };
      panels?: Placed[];
    }
    const all = ((dashboard.panels ?? []) as Placed[]).flatMap((p) => [p, ...(p.panels ?? [])]);
    const ids = all.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, `duplicate panel ids: ${ids.join(', ')}`);
    const placed = all.filter((p) => p.gridPos);
    for (const [i, a] of placed.entries()) {
      for (const b of placed.slice(i + 1)) {
        const [g, h] = [a.gridPos!, b.gridPos!];
        const apart = g.x + g.w <= h.x || h.x + h.w <= g.x || g.y + g.h <= h.y || h.y + h.h <= g.y;
        assert.ok(apart, `"${a.title}" and "${b.title}" overlap`);
      }
    }
  });

  test('every query selects series the sidecar exports', () => {
    for (const panel of panels) for (const t of panel.targets ?? []) checkQuery(t.expr ?? '', `panel "${panel.title}"`);
    for (const v of dashboard.templating?.list ?? []) {
      const q = v.query as { query?: string } | undefined;
      if (typeof q?.query === 'string') checkQuery(labelValuesSelector(q.query), `variable $${v.name}`);
    }
  });

  test('shows every metric of the contract', () => {
    const shown = new Set(
      panels.flatMap((p) => (p.targets ?? []).flatMap((t) => selectors(t.expr ?? '').map((s) => s.metric))),
    );
    const base = (name: string) => name.replace(/_(bucket|sum|count)$/, '');
    const shownBase = new Set([...shown].map(base));
    for (const name of exposition.series.keys()) {
      if (/_process_|_nodejs_/.test(name)) continue; // default metrics: CPU and memory are shown, the rest is optional
      assert.ok(shownBase.has(base(name)), `${name} is on no panel`);
    }
  });
});

/** Names, label names and literal label values of every selector must exist in the live scrape. */
function checkQuery(expr: string, where: string): void {
  const found = selectors(expr);
  assert.ok(found.length > 0, `${where}: no metric in ${expr}`);
  for (const { metric, matchers } of found) {
    if (PROMETHEUS_SERIES.has(metric)) {
      assert.ok(
        matchers.some((m) => m.label === 'container' && m.value === SIDECAR_CONTAINER),
        `${where}: ${metric} must select container="${SIDECAR_CONTAINER}"`,
      );
      continue;
    }
    const labels = exposition.series.get(metric);
    assert.ok(labels, `${where}: ${metric} is not exported by the sidecar`);
    for (const m of matchers) {
      if (TARGET_LABELS.has(m.label)) continue;
      const values = labels.get(m.label);
      assert.ok(values, `${where}: ${metric} has no label ${m.label}`);
      for (const value of literalValues(m))
        assert.ok(
          knownValue(metric, m.label, value, values),
          `${where}: ${metric}{${m.label}="${value}"} never appears`,
        );
    }
  }
}

/** Counters created at zero show every value; request codes for errors we did not provoke come from src/errors.ts. */
function knownValue(metric: string, label: string, value: string, seen: Set<string>): boolean {
  if (seen.has(value)) return true;
  if (metric === 'signing_sidecar_requests_total' && label === 'code' && value.startsWith('sidecar.')) {
    return readFileSync(`${REPO_ROOT}src/errors.ts`, 'utf8').includes(`'${value}'`);
  }
  return false;
}

function githubAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\w\- ]/g, '')
    .replace(/ /g, '-');
}
