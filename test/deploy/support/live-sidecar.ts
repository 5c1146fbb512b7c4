// Starts the real sidecar (startSidecar) against the gateway simulator, on a Redis store (as a fleet runs, and the
// only store that exports the Redis command series the alerts and the dashboard read), sends one signed deposit
// through it and scrapes its admin listener: what the alerts and the dashboard are checked against.
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startSimulator } from '@signing-sidecar/simulator';
import { makeKeys } from '../../support/keys.js';
import { startRedis } from '../../support/redis-server.js';
import { depositJson } from '../../support/payloads.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar } from '../../support/sidecar.js';

export interface Scrape {
  readonly metricsText: string;
  readonly probes: Record<string, number>;
  readonly depositStatus: number;
  readonly depositBody: string;
}

export interface Vendor {
  readonly dir: string;
  readonly env: NodeJS.ProcessEnv;
  readonly publicKeyPem: string;
  readonly username: string;
  readonly password: string;
}

/** A vendor's key and password in files (the shared test fixtures), and the sidecar env pointed at `baseUrl`. */
export async function makeVendor(baseUrl: string): Promise<Vendor> {
  const keys = await makeKeys();
  const env = await sidecarEnv(keys, baseUrl, { SIDECAR_LISTEN_HOST: '127.0.0.1', SIDECAR_LOG_LEVEL: 'warn' });
  return { dir: keys.dir, env, publicKeyPem: keys.publicKeyPem, username: TEST_USERNAME, password: TEST_PASSWORD };
}

export async function waitFor(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      await res.arrayBuffer();
      if (res.status === 200) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${url} not ready after ${timeoutMs} ms (${last})`);
}

export async function postDeposit(proxyUrl: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${proxyUrl}/api/v2/transaction/init`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: depositJson(),
  });
  return { status: res.status, body: await res.text() };
}

export async function scrapeLiveSidecar(): Promise<Scrape> {
  const redis = await startRedis();
  try {
    return await scrapeOnStore({ SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: redis.url });
  } finally {
    await redis.close();
  }
}

async function scrapeOnStore(store: NodeJS.ProcessEnv): Promise<Scrape> {
  const placeholder = await makeVendor('http://127.0.0.1:1');
  const simulator = await startSimulator({
    accounts: [
      { username: placeholder.username, password: placeholder.password, publicKeyPem: placeholder.publicKeyPem },
    ],
  });
  // Money limits on the deposit route, one rule per mode, far above the one deposit: their series are exported.
  const limitsFile = join(placeholder.dir, 'limits.yaml');
  await writeFile(
    limitsFile,
    `rules:
  - { name: deposits-watch, route: /api/v2/transaction/init, currency: USD, mode: report,
      windows: [{ period: 1h, maxTotal: "1000000.00" }] }
  - { name: deposits-cap, route: /api/v2/transaction/init, maxPerMinute: 1000 }
`,
  );
  const env = { ...placeholder.env, SIDECAR_BASE_URL: simulator.baseUrl, SIDECAR_LIMITS_FILE: limitsFile, ...store };
  const vendor = { ...placeholder, env };
  try {
    const { sidecar } = await startTestSidecar(vendor.env);
    try {
      // Ready means serving; the token is reported on its own endpoint, and the deposit needs one.
      await waitFor(`${sidecar.adminUrl}/healthz/token`, 10_000);
      const deposit = await postDeposit(sidecar.egressUrl);
      const probes: Record<string, number> = {};
      for (const path of ['/livez', '/readyz', '/startupz', '/healthz/token']) {
        const res = await fetch(`${sidecar.adminUrl}${path}`);
        await res.arrayBuffer();
        probes[path] = res.status;
      }
      const metricsText = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
      return { metricsText, probes, depositStatus: deposit.status, depositBody: deposit.body };
    } finally {
      await sidecar.shutdown('test done');
    }
  } finally {
    await simulator.close();
    await rm(vendor.dir, { recursive: true, force: true });
  }
}
