// Starts the real sidecar (startSidecar) against the gateway simulator, sends one signed deposit through it
// and scrapes its admin listener: what the alerts and the dashboard are checked against.
import { generateKeyPairSync } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSidecar } from '../../../src/app.js';
import { loadConfig } from '../../../src/config/load.js';
import { startSimulator } from '../../../src/simulator/index.js';

export const DEPOSIT = { amount: '100.50', currency: 'USD', gateway: 'card', user_id: 'u-1', invoice_no: 'inv-1' };

export interface Scrape {
  readonly metricsText: string;
  readonly probes: Record<string, number>;
  readonly depositStatus: number;
  readonly depositBody: string;
}

export interface Vendor {
  readonly dir: string;
  readonly env: Record<string, string>;
  readonly publicKeyPem: string;
  readonly username: string;
  readonly password: string;
}

/** A vendor's key and password in files, and the sidecar env that points at them and at `baseUrl`. */
export async function makeVendor(baseUrl: string): Promise<Vendor> {
  const dir = await mkdtemp(join(tmpdir(), 'deploy-vendor-'));
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const username = 'vendor@example.com';
  const password = 'example-password';
  await writeFile(join(dir, 'private-key.pem'), privateKey.export({ type: 'pkcs8', format: 'pem' }));
  await writeFile(join(dir, 'password'), `${password}\n`);
  const env = {
    SIDECAR_BASE_URL: baseUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: username,
    SIDECAR_PASSWORD_FILE: join(dir, 'password'),
    SIDECAR_PRIVATE_KEY_FILE: join(dir, 'private-key.pem'),
    SIDECAR_LISTEN_HOST: '127.0.0.1',
    SIDECAR_LISTEN_PORT: '0',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: '0',
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
    SIDECAR_SHUTDOWN_MAX_DELAY_MS: '2000',
    SIDECAR_LOG_LEVEL: 'warn',
  };
  return { dir, env, publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(), username, password };
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
    body: JSON.stringify(DEPOSIT),
  });
  return { status: res.status, body: await res.text() };
}

export async function scrapeLiveSidecar(): Promise<Scrape> {
  const placeholder = await makeVendor('http://127.0.0.1:1');
  const simulator = await startSimulator({
    accounts: [
      { username: placeholder.username, password: placeholder.password, publicKeyPem: placeholder.publicKeyPem },
    ],
  });
  const vendor = { ...placeholder, env: { ...placeholder.env, SIDECAR_BASE_URL: simulator.baseUrl } };
  try {
    const sidecar = await startSidecar(loadConfig(vendor.env), { logDestination: { write: () => undefined } });
    try {
      await waitFor(`${sidecar.adminUrl}/readyz`, 10_000);
      const deposit = await postDeposit(sidecar.proxyUrl);
      const probes: Record<string, number> = {};
      for (const path of ['/livez', '/readyz', '/startupz']) {
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
