// A real Prometheus (Debian package `prometheus`) scrapes the sidecar's admin listener while the test makes the
// gateway simulator answer every gateway error code; Prometheus's own query API must then show each counter.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GATEWAY_ERROR_CODES } from '../../src/observability/metric-names.js';
import { PROVOKED_CODES, provokeGatewayErrors, startSimWorld, type SimWorld } from '../support/sim-world.js';
import { freeStablePort } from '../support/free-port.js';

const METRIC = 'signing_sidecar_gateway_errors_total';

/** Fails (never skips) when a tool is missing: CI installs it, and a skipped check proves nothing. */
function requireTool(name: string): void {
  const probe = spawnSync(name, ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    assert.fail(
      `${name} is required for this test but could not run (${probe.error?.message ?? `exit ${probe.status}`}); install the Debian package "prometheus" (apt-get install prometheus)`,
    );
  }
}

interface Sample {
  readonly metric: Record<string, string>;
  readonly value: [number, string];
}

async function query(promUrl: string, expr: string): Promise<Sample[]> {
  const res = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = (await res.json()) as { status: string; data?: { result?: Sample[] } };
  assert.equal(body.status, 'success', JSON.stringify(body));
  return body.data?.result ?? [];
}

/** Polls `check` until it returns undefined (done) or the deadline passes; the last complaint is the error. */
async function eventually(what: string, ms: number, check: () => Promise<string | undefined>): Promise<void> {
  const deadline = Date.now() + ms;
  let problem: string | undefined = 'never checked';
  while (Date.now() < deadline) {
    problem = await check().catch((err: unknown) => (err instanceof Error ? err.message : String(err)));
    if (problem === undefined) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.fail(`${what} within ${ms} ms: ${problem}`);
}

function byCode(samples: Sample[]): Map<string, number> {
  return new Map(samples.map((s) => [s.metric.code ?? '', Number(s.value[1])]));
}

describe('a real Prometheus scrapes the sidecar', () => {
  let world: SimWorld;
  let prometheus: ChildProcess | undefined;
  let promUrl = '';
  let dir = '';
  let promLog = '';

  before(async () => {
    requireTool('prometheus');
    requireTool('promtool');
    world = await startSimWorld();
    dir = await mkdtemp(join(tmpdir(), 'sidecar-prometheus-'));
    const target = new URL(world.running.sidecar.adminUrl).host;
    const config = [
      'global:',
      '  scrape_interval: 1s',
      '  scrape_timeout: 1s',
      'scrape_configs:',
      '  - job_name: signing-sidecar',
      '    static_configs:',
      `      - targets: ['${target}']`,
      '',
    ].join('\n');
    await writeFile(join(dir, 'prometheus.yml'), config);
    const port = await freeStablePort();
    promUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(
      'prometheus',
      [
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--log.level=warn',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    prometheus.stdout?.on('data', (c: Buffer) => (promLog += c.toString()));
    prometheus.stderr?.on('data', (c: Buffer) => (promLog += c.toString()));
    await eventually('prometheus ready', 15_000, async () => {
      if (prometheus?.exitCode !== null) return `prometheus exited ${String(prometheus?.exitCode)}: ${promLog}`;
      const res = await fetch(`${promUrl}/-/ready`);
      return res.status === 200 ? undefined : `HTTP ${res.status}`;
    });
  });

  after(async () => {
    if (prometheus && prometheus.exitCode === null) {
      const exited = new Promise((resolve) => prometheus?.once('exit', resolve));
      prometheus.kill('SIGTERM');
      const timer = setTimeout(() => prometheus?.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    await world?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('sees every gateway error counter at zero before any error, then each provoked code', async () => {
    await eventually('first scrape with every code at 0', 10_000, async () => {
      const seen = byCode(await query(promUrl, METRIC));
      const missing = GATEWAY_ERROR_CODES.filter((code) => seen.get(code) !== 0);
      return missing.length === 0
        ? undefined
        : `not at 0 yet: ${missing.join(', ')} (have ${JSON.stringify([...seen])})`;
    });
    const up = await query(promUrl, 'up{job="signing-sidecar"}');
    assert.equal(up[0]?.value[1], '1');

    await provokeGatewayErrors(world);

    await eventually('every provoked code counted by Prometheus', 10_000, async () => {
      const seen = byCode(await query(promUrl, METRIC));
      const missing = PROVOKED_CODES.filter((code) => (seen.get(code) ?? 0) < 1);
      return missing.length === 0 ? undefined : `missing ${missing.join(', ')} (have ${JSON.stringify([...seen])})`;
    });
    // Bounded cardinality: exactly the contract's label values, no gateway message or raw code leaked in.
    const codes = (await query(promUrl, METRIC)).map((s) => s.metric.code ?? '').sort();
    assert.deepEqual(codes, [...GATEWAY_ERROR_CODES].sort());
    const info = await query(promUrl, 'signing_sidecar_build_info');
    assert.equal(info[0]?.metric.environment, 'staging');
    assert.match(info[0]?.metric.key_fingerprint ?? '', /^[0-9a-f]{64}$/);
    const retries = await query(promUrl, 'signing_sidecar_retries_total{reason="token_rejected"}');
    assert.ok(Number(retries[0]?.value[1]) >= 1, 'the FAILED answer was retried once with a fresh token');
  });

  it('promtool check metrics accepts the exposition', async () => {
    const exposition = await (await fetch(`${world.running.sidecar.adminUrl}/metrics`)).text();
    const lint = spawnSync('promtool', ['check', 'metrics'], { input: exposition, encoding: 'utf8' });
    assert.equal(lint.status, 0, `promtool complained:\n${lint.stdout}${lint.stderr}`);
    assert.equal(`${lint.stdout}${lint.stderr}`.trim(), '');
    assert.equal(exposition.includes('PRIVATE KEY'), false);
  });
});
