import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { startSidecar, type RunningSidecar, type SidecarDeps } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { METRICS } from '../../src/observability/metric-names.js';
import { makeKeys, type TestKeys } from './keys.js';
import { RecordingGateway, TEST_PASSWORD, TEST_USERNAME } from './recording-gateway.js';
import { waitFor } from './wait-for.js';

/** Collects every log byte so tests can grep for secrets that must never appear. */
export class CapturedOutput extends Writable {
  text = '';
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.text += chunk.toString('utf8');
    callback();
  }
  lines(): Array<Record<string, unknown>> {
    return this.text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  }
}

export interface TestSidecar {
  readonly sidecar: RunningSidecar;
  readonly logs: CapturedOutput;
  stop(): Promise<void>;
}

/** The env a user would set, pointed at a test gateway, listeners on port 0. */
export async function sidecarEnv(
  keys: TestKeys,
  baseUrl: string,
  extra: NodeJS.ProcessEnv = {},
): Promise<NodeJS.ProcessEnv> {
  const passwordFile = join(keys.dir, 'password');
  await writeFile(passwordFile, `${TEST_PASSWORD}\n`, { mode: 0o600 });
  return {
    SIDECAR_BASE_URL: baseUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: TEST_USERNAME,
    SIDECAR_PASSWORD_FILE: passwordFile,
    SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    SIDECAR_LISTEN_PORT: '0',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: '0',
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
    SIDECAR_SHUTDOWN_MAX_DELAY_MS: '2000',
    SIDECAR_LOG_LEVEL: 'debug',
    ...extra,
  };
}

export async function startTestSidecar(env: NodeJS.ProcessEnv, deps: SidecarDeps = {}): Promise<TestSidecar> {
  const logs = new CapturedOutput();
  const sidecar = await startSidecar(loadConfig(env), { logDestination: logs, ...deps });
  return { sidecar, logs, stop: () => sidecar.shutdown('test') };
}

/** Resolves once the sidecar holds a token (or throws after `ms`). */
export async function waitUntilReady(sidecar: RunningSidecar, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!sidecar.tokens.hasValidToken()) {
    if (Date.now() > until) throw new Error('sidecar did not become ready');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A counter or gauge of one in-process sidecar's registry (no labels). */
export async function podMetric(pod: TestSidecar, name: string): Promise<number> {
  const text = await pod.sidecar.metrics.registry.metrics();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

/**
 * Resolves once the egress listener holds `count` requests (its in-flight gauge: their headers read), rather than a
 * sleep that stands for "the request has reached the sidecar" and falls short on a loaded machine.
 */
export async function untilInFlight(running: TestSidecar, count: number, ms = 5_000): Promise<void> {
  await waitFor(
    `${count} request(s) in flight`,
    async () => (await podMetric(running, METRICS.inFlight)) === count,
    ms,
  );
}

export interface ReadySidecar {
  readonly gateway: RecordingGateway;
  readonly running: TestSidecar;
}

/**
 * A RecordingGateway and a sidecar in front of it that already holds a token (within `readyWithinMs`); both are
 * stopped after `body`, whatever happens (stopping twice is harmless, so a test may stop either itself).
 */
export async function withReadySidecar(
  extraEnv: NodeJS.ProcessEnv,
  body: (ready: ReadySidecar) => Promise<void>,
  configure: (gateway: RecordingGateway) => void = () => undefined,
  readyWithinMs?: number,
): Promise<void> {
  const keys = await makeKeys();
  const gateway = await new RecordingGateway().start();
  configure(gateway);
  const running = await startTestSidecar(await sidecarEnv(keys, gateway.url, extraEnv));
  try {
    await waitUntilReady(running.sidecar, readyWithinMs);
    await body({ gateway, running });
  } finally {
    await running.stop();
    await gateway.stop();
  }
}
