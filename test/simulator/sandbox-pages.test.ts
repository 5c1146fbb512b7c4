// The simulator's sandbox pages in a real browser (Debian's Chromium, driven by playwright-core): a deposit made
// through the sidecar, its transaction_link opened, "Pay" or "Decline" pressed, and the signed postback followed
// through the sidecar's postback receiver to the application; the dashboard showing a refused request with
// its spec code; and the payment form refusing another site's post.
//
// UPDATE_SCREENSHOTS=1 writes the screenshots docs/simulator.md shows (docs/images/); without it the run writes
// nothing into the checkout.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { handleControl } from '../../packages/simulator/src/control-api.js';
import type { SimContext } from '../../packages/simulator/src/context.js';
import { ApplicationStub } from '../postback/support.js';
import { freeStablePort } from '../support/free-port.js';
import { makeKeys as makeSidecarKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { scratchDir } from '../support/scratch.js';
import { deposit, postJson } from '../support/sim-world.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { DEPOSIT, codeOf, freshNonce, makeKeys, send, signedPost, type TestKeys } from './support.js';

/** Debian's package, which `npm test` installs as root (scripts/test-prerequisites.sh); CHROMIUM_PATH overrides. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  process.stderr.write(`the browser tests need Debian's chromium package (${CHROMIUM}): apt-get install chromium\n`);
  process.exit(1);
}

const SCREENSHOTS = process.env.UPDATE_SCREENSHOTS === '1';
const IMAGES = fileURLToPath(new URL('../../docs/images/', import.meta.url));
/** A second account the test signs for itself, so its logins never supersede the sidecar's token. */
const DIRECT_USER = 'direct@example.com';
const DIRECT_PASSWORD = 'another correct horse';
const STEP_MS = 15_000;

let sim: RunningSimulator;
let running: TestSidecar;
let webhook: ApplicationStub;
let browser: Browser;
let directKeys: TestKeys;
let attacker: Server | undefined;

before(async () => {
  const [sidecarKeys, keys] = await Promise.all([makeSidecarKeys(), makeKeys()]);
  directKeys = keys;
  webhook = await new ApplicationStub().start();
  const receiverPort = await freeStablePort();
  const webhookUrl = `http://127.0.0.1:${receiverPort}/hooks/payments`;
  sim = await startSimulator({
    accounts: [
      {
        username: TEST_USERNAME,
        password: TEST_PASSWORD,
        publicKeyPem: sidecarKeys.publicKeyPem,
        webhookUrl,
        signedPostbacks: true,
      },
      { username: DIRECT_USER, password: DIRECT_PASSWORD, publicKeyPem: directKeys.publicKeyPem },
    ],
    postbackRetry: { initialDelayMs: 100, maxDelayMs: 200, timeoutMs: 5_000 },
  });
  const keyFile = join(scratchDir('sandbox-postback-key-'), 'gateway-postback.pub.pem');
  await writeFile(keyFile, sim.postbackPublicKeyPem);
  running = await startTestSidecar(
    await sidecarEnv(sidecarKeys, sim.baseUrl, {
      SIDECAR_LOG_LEVEL: 'warn',
      SIDECAR_POSTBACK_FORWARD_URL: webhook.url,
      SIDECAR_POSTBACK_PUBLIC_URL: webhookUrl,
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: keyFile,
      SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
      SIDECAR_POSTBACK_LISTEN_PORT: String(receiverPort),
    }),
  );
  await waitUntilReady(running.sidecar);
  // Chromium's sandbox needs an unprivileged user; as root (CI containers) it must be switched off to start.
  const args = process.getuid?.() === 0 ? ['--no-sandbox'] : [];
  browser = await chromium.launch({ executablePath: CHROMIUM, args, timeout: STEP_MS });
});

after(async () => {
  // Each step on its own, so one failure (or a before() that stopped half-way) does not leave the rest running.
  const steps: Array<(() => Promise<unknown>) | undefined> = [
    browser === undefined ? undefined : () => browser.close(),
    attacker === undefined ? undefined : () => closeServer(attacker!),
    running === undefined ? undefined : () => running.stop(),
    sim === undefined ? undefined : () => sim.close(),
    webhook === undefined ? undefined : () => webhook.stop(),
  ];
  for (const step of steps) await step?.().catch(() => undefined);
});

async function newPage(viewport = { width: 1000, height: 700 }): Promise<Page> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  return page;
}

/** A deposit through the sidecar, as an internal service makes it; returns its id and transaction_link. */
async function depositThroughSidecar(): Promise<{ id: string; link: string; invoice: string }> {
  const payload = deposit();
  const answer = await postJson(running.sidecar.egressUrl, payload);
  assert.equal(answer.status, 200, answer.body);
  const body = JSON.parse(answer.body) as { transaction_id: string; transaction_link: string };
  return { id: body.transaction_id, link: body.transaction_link, invoice: (JSON.parse(payload) as Payload).invoice_no };
}

interface Payload {
  readonly invoice_no: string;
  readonly transaction_id?: string;
  readonly status?: string;
}

async function postbackFor(id: string): Promise<{ payload: Payload; verified: string }> {
  const deadline = Date.now() + STEP_MS;
  for (;;) {
    for (const r of webhook.received) {
      const payload = JSON.parse(r.body.toString('utf8')) as Payload;
      if (payload.transaction_id === id) return { payload, verified: String(r.headers['x-postback-verified']) };
    }
    if (Date.now() > deadline) throw new Error(`no postback for ${id} reached the application`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

async function directToken(): Promise<string> {
  const res = await send(sim.listenUrl, {
    path: '/api/v2/auth/token',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ grant_type: 'password', username: DIRECT_USER, password: DIRECT_PASSWORD }),
  });
  assert.equal(res.status, 200, res.text);
  return String(res.json().access_token);
}

describe('the payment page in a browser', { timeout: 120_000 }, () => {
  for (const [button, status] of [
    ['Pay', 'SUCCESS'],
    ['Decline', 'FAILED'],
  ] as const) {
    it(`"${button}" completes the deposit as ${status}; the postback reaches the webhook through the receiver`, async () => {
      const { id, link, invoice } = await depositThroughSidecar();
      const page = await newPage();
      const response = await page.goto(link);
      assert.equal(response?.status(), 200);
      assert.equal(await page.textContent('#status'), 'PENDING');
      assert.equal(await page.textContent('#invoice'), invoice);
      // The style sheet applies: the CSP allows it by its hash, and a hash that no longer matches would drop it.
      // (An expression as source text: the tests compile without the DOM's types.)
      const color: unknown = await page.evaluate("getComputedStyle(document.getElementById('status')).color");
      assert.equal(color, 'rgb(138, 90, 0)');
      if (SCREENSHOTS && status === 'SUCCESS') {
        await mkdir(IMAGES, { recursive: true });
        await page.screenshot({ path: join(IMAGES, 'sandbox-payment-page.png') });
      }
      await page.getByRole('button', { name: button }).click();
      await page.waitForSelector(`#status.${status}`);
      assert.equal(await page.textContent('#status'), status);
      // The completion waited for the first delivery, so the page already says what the webhook answered.
      assert.match((await page.textContent('#postback')) ?? '', /HTTP 200, delivered/);
      assert.equal(await page.getByRole('button').count(), 0, 'a final transaction offers no buttons');
      const postback = await postbackFor(id);
      assert.equal(postback.payload.status, status);
      assert.equal(postback.verified, 'signature', 'the receiver verified the simulator signature');
      assert.equal(sim.transactions().find((t) => t.transaction_id === id)?.status, status);
      await page.context().close();
    });
  }

  it('sends the headers that keep the page from being framed, scripted or cached', async () => {
    const { link } = await depositThroughSidecar();
    const res = await fetch(link);
    assert.equal(res.status, 200);
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.match(csp, /form-action 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline/);
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
    assert.equal(res.headers.get('cache-control'), 'no-store');
  });

  it('escapes every value it puts into HTML', async () => {
    const token = await directToken();
    const hostile = `<img src=x id=injected onerror="alert(1)">'"&amp;`;
    const res = await signedPost(sim, {
      key: directKeys.privateKey,
      token,
      payload: { ...DEPOSIT, invoice_no: hostile },
    });
    assert.equal(res.status, 200, res.text);
    const page = await newPage();
    await page.goto(String(res.json().transaction_link));
    assert.equal(await page.textContent('#invoice'), hostile);
    assert.equal(await page.locator('#injected').count(), 0);
    await page.context().close();
  });
});

describe('the payment form refuses posts that do not come from its page', { timeout: 60_000 }, () => {
  it("refuses another site's form post without the page's token", async () => {
    const { id, link } = await depositThroughSidecar();
    // Another origin (another port) with a form aimed at the payment page, as a hostile site would make it.
    const forms = (token: string) =>
      `<!doctype html><form method="post" action="${link}"><input type="hidden" name="status" value="SUCCESS">` +
      (token === '' ? '' : `<input type="hidden" name="token" value="${token}">`) +
      `<button type="submit">Win a prize</button></form>`;
    let served = forms('');
    attacker = createServer((_req: IncomingMessage, res) =>
      res.writeHead(200, { 'content-type': 'text/html' }).end(served),
    );
    await new Promise<void>((resolve) => attacker!.listen(0, '127.0.0.1', resolve));
    const attackerUrl = `http://127.0.0.1:${(attacker.address() as AddressInfo).port}/`;

    const page = await newPage();
    await page.goto(attackerUrl);
    const [refused] = await Promise.all([
      page.waitForResponse((r) => r.url() === link && r.request().method() === 'POST'),
      page.getByRole('button', { name: 'Win a prize' }).click(),
    ]);
    assert.equal(refused.status(), 403);
    await page.waitForSelector('h1');
    assert.match((await page.textContent('h1')) ?? '', /sim\.pay\.token\.invalid/);

    // Even a leaked token does not help another site: the browser says the post is not from the page itself.
    served = forms(await pageToken(link));
    await page.goto(attackerUrl);
    const [crossSite] = await Promise.all([
      page.waitForResponse((r) => r.url() === link && r.request().method() === 'POST'),
      page.getByRole('button', { name: 'Win a prize' }).click(),
    ]);
    assert.equal(crossSite.status(), 403);
    await page.waitForSelector('h1');
    assert.match((await page.textContent('h1')) ?? '', /sim\.pay\.cross_site/);
    assert.equal(sim.transactions().find((t) => t.transaction_id === id)?.status, 'PENDING');
    await page.context().close();
  });

  it('refuses a post with no token or a wrong one, and keeps the transaction pending', async () => {
    const { id, link } = await depositThroughSidecar();
    const path = new URL(link).pathname;
    const post = (body: string) =>
      send(sim.listenUrl, { path, headers: { 'content-type': 'application/x-www-form-urlencoded' }, body });
    for (const body of ['status=SUCCESS', 'status=SUCCESS&token=', `status=SUCCESS&token=${freshNonce()}`]) {
      const res = await post(body);
      assert.equal(res.status, 403, body);
      assert.match(res.text, /sim\.pay\.token\.invalid/);
      assert.match(String(res.headers['content-type']), /^text\/html/);
    }
    assert.equal(sim.transactions().find((t) => t.transaction_id === id)?.status, 'PENDING');
    // The right token from the page completes it; the answer sends the browser back to the page.
    const ok = await post(`status=FAILED&token=${await pageToken(link)}`);
    assert.equal(ok.status, 303);
    assert.equal(ok.headers.location, path);
    assert.equal(sim.transactions().find((t) => t.transaction_id === id)?.status, 'FAILED');
    const again = await post(`status=SUCCESS&token=${await pageToken(link).catch(() => 'gone')}`);
    assert.equal(again.status, 403, 'a final page offers no form, so no token to post');
  });
});

/** The token the page's form carries (what the customer's browser would post back). */
async function pageToken(link: string): Promise<string> {
  const text = await (await fetch(link)).text();
  const match = /name="token" value="([^"]+)"/.exec(text);
  if (match?.[1] === undefined) throw new Error('the page has no form token');
  return match[1];
}

describe('the dashboard', { timeout: 60_000 }, () => {
  it('lists a refused request with its spec code and reason, and shows nothing secret', async () => {
    const token = await directToken();
    const wrongBase = await signedPost(sim, {
      key: directKeys.privateKey,
      token,
      signedBase: 'https://gateway.example.com',
    });
    assert.equal(codeOf(wrongBase), 'signature.verify.failed');
    const skewed = await signedPost(sim, {
      key: directKeys.privateKey,
      token,
      timestamp: String(sim.clock.nowSeconds() - 300),
    });
    assert.equal(codeOf(skewed), 'signature.timestamp.expired');
    const nonce = freshNonce();
    assert.equal((await signedPost(sim, { key: directKeys.privateKey, token, nonce })).status, 200);
    assert.equal(
      codeOf(await signedPost(sim, { key: directKeys.privateKey, token, nonce })),
      'signature.nonce.replayed',
    );
    sim.faults.inject({ kind: '5xx', status: 502, count: 3 });

    const page = await newPage({ width: 1500, height: 1000 });
    const response = await page.goto(`${sim.listenUrl}/_sim/`);
    assert.equal(response?.status(), 200);
    assert.equal(response?.headers()['x-frame-options'], 'DENY');
    const rows = await page.locator('#requests tr').allTextContents();
    const refused = rows.find((r) => r.includes('signature.verify.failed'));
    assert.ok(refused, rows.join('\n'));
    assert.match(refused, /401/);
    assert.match(refused, new RegExp(`server signed URL is ${sim.baseUrl}/api/v2/transaction/init`));
    assert.match(refused, new RegExp(DIRECT_USER));
    assert.ok(rows.some((r) => r.includes('signature.timestamp.expired') && /300 s behind/.test(r)));
    assert.ok(rows.some((r) => r.includes('signature.nonce.replayed')));
    assert.ok(rows.some((r) => r.includes('accepted')));
    assert.match((await page.textContent('#faults')) ?? '', /5xx\s*HTTP 502\s*signed\s*3/);
    const accounts = (await page.textContent('#accounts')) ?? '';
    assert.match(accounts, /[0-9a-f]{64}/, 'keys by SHA-256 fingerprint');
    assert.match((await page.textContent('#transactions')) ?? '', /HTTP 200, delivered/);

    const whole = await page.content();
    for (const secret of [DIRECT_PASSWORD, TEST_PASSWORD, token, 'BEGIN PUBLIC KEY', String(DEPOSIT.invoice_no)]) {
      assert.ok(!whole.includes(secret), `the dashboard must not show ${secret.slice(0, 12)}...`);
    }
    if (SCREENSHOTS) {
      await mkdir(IMAGES, { recursive: true });
      await page.screenshot({ path: join(IMAGES, 'sandbox-dashboard.png') });
    }
    sim.faults.clear();
    await page.context().close();
  });

  it('reloads itself when asked to, and refuses a nonsense period', async () => {
    const page = await newPage();
    await page.goto(`${sim.listenUrl}/_sim/?refresh=5`);
    assert.equal(await page.locator('meta[http-equiv="refresh"]').getAttribute('content'), '5');
    await page.context().close();
    const bad = await send(sim.listenUrl, { method: 'GET', path: '/_sim/?refresh=0.5' });
    assert.equal(bad.status, 400);
  });

  it('answers loopback clients only, as the control API does', async () => {
    // Tests send traffic to loopback addresses only, so a remote client is represented by its socket address:
    // handleControl is the guard the server runs for every /_sim/ request, the dashboard included.
    const remote = {
      socket: { remoteAddress: '203.0.113.9' },
      method: 'GET',
      url: '/_sim/',
    } as unknown as IncomingMessage;
    await assert.rejects(handleControl(undefined as unknown as SimContext, remote, '/_sim/'), (err: unknown) => {
      assert.equal((err as { code?: string }).code, 'sim.control.forbidden');
      assert.equal((err as { status?: number }).status, 403);
      return true;
    });
    const local = await send(sim.listenUrl, { method: 'GET', path: '/_sim/' });
    assert.equal(local.status, 200);
    assert.match(String(local.headers['content-type']), /^text\/html/);
  });
});
