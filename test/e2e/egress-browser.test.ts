// The egress listener against a real browser (Debian's Chromium, driven by playwright-core) on the developer's
// machine: a page that rebinds its own name to 127.0.0.1 (Chromium's --host-resolver-rules stands in for the
// attacker's DNS), and a page that posts to the sidecar's loopback address across origins. Neither payment may
// reach the gateway.
//
// Chromium itself blocks a non-secure page's requests to loopback (Private / Local Network Access); Firefox and
// Safari do not. The test switches that off, so that Chromium sends what they send and the sidecar alone refuses.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { makeKeys } from '../support/keys.js';
import { depositJson } from '../support/payloads.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';

/** Debian's package, which `npm test` installs as root (scripts/test-prerequisites.sh); CHROMIUM_PATH overrides. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  process.stderr.write(`the browser tests need Debian's chromium package (${CHROMIUM}): apt-get install chromium\n`);
  process.exit(1);
}

const PATH = '/api/v2/transaction/init';
const STEP_MS = 15_000;
const PAGE = '<!doctype html><title>cute cats</title><p>nothing to see here</p>';

let gateway: RecordingGateway;
let running: TestSidecar;
let browser: Browser;
let port: string;

before(async () => {
  const keys = await makeKeys();
  gateway = await new RecordingGateway().start();
  running = await startTestSidecar(await sidecarEnv(keys, gateway.url, { SIDECAR_LOG_LEVEL: 'warn' }));
  await waitUntilReady(running.sidecar);
  port = new URL(running.sidecar.egressUrl).port;
  // Chromium's sandbox needs an unprivileged user; as root (CI containers) it must be switched off to start.
  const sandbox = process.getuid?.() === 0 ? ['--no-sandbox'] : [];
  const rebinding = '--host-resolver-rules=MAP attacker.example 127.0.0.1';
  const asOtherBrowsers =
    '--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights';
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [...sandbox, rebinding, asOtherBrowsers],
    timeout: STEP_MS,
  });
});

after(async () => {
  // Each step on its own, so one failure (or a before() that stopped half-way) does not leave the rest running.
  const steps: Array<(() => Promise<unknown>) | undefined> = [
    browser === undefined ? undefined : () => browser.close(),
    running === undefined ? undefined : () => running.stop(),
    gateway === undefined ? undefined : () => gateway.stop(),
  ];
  for (const step of steps) await step?.().catch(() => undefined);
});

/** The attacker's page at http://attacker.example:<the sidecar's port>/, served by the test, not by the sidecar. */
async function attackerPage(): Promise<Page> {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const url = `http://attacker.example:${port}/`;
  await page.route(url, (route) => route.fulfill({ status: 200, contentType: 'text/html', body: PAGE }));
  await page.goto(url);
  return page;
}

describe('egress listener and a browser on the same machine', () => {
  it('DNS rebinding: a same-origin JSON post from attacker.example gets 421 forbidden_host, nothing sent', async () => {
    const page = await attackerPage();
    const answer = await page.evaluate(
      async ({ path, body }) => {
        const res = await fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        return { status: res.status, body: await res.text() };
      },
      { path: PATH, body: depositJson() },
    );
    assert.equal(answer.status, 421, answer.body);
    assert.equal((JSON.parse(answer.body) as { code: string }).code, 'sidecar.request.forbidden_host');
    assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
    await page.context().close();
  });

  it("a page's cross-origin post to 127.0.0.1 is refused as a browser's (Origin), nothing sent", async () => {
    const page = await attackerPage();
    // no-cors: the page cannot read the answer, but it would not need to for a payment to be made.
    const sent = await page.evaluate(
      async ({ url, body }) => {
        await fetch(url, { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body });
        return true;
      },
      { url: `http://127.0.0.1:${port}${PATH}`, body: depositJson() },
    );
    assert.equal(sent, true);
    const lines = () =>
      running.logs.lines().filter((line) => line.event === 'request' && line.code === 'sidecar.request.browser_origin');
    const deadline = Date.now() + STEP_MS;
    while (lines().length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(lines().length, 1, 'the refusal is logged with its code');
    assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
    await page.context().close();
  });
});
