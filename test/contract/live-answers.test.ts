// Every answer the sidecar itself makes matches the OpenAPI document it serves (GET /openapi.json on the admin
// listener): each code of the error catalogue is driven for real on a running sidecar, and its live status,
// headers and body are validated against the document with ajv (JSON Schema 2020-12, OpenAPI 3.1's dialect); so
// are a gateway answer passed through, a replay, and a replayed outcome_unknown. A code added to the catalogue
// without a case here fails the first test, by name.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { request, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { SidecarDeps } from '../../src/app.js';
import {
  EGRESS_FREE_BODY_BYTES,
  memoryBudget,
  POSTBACK_MAX_BODY_BYTES,
  readProcessMemory,
} from '../../src/memory/budget.js';
import { errorCatalogue } from '../../src/contract/error-catalogue.js';
import type { StateStore } from '../../src/state/state-store.js';
import { OPENAPI_FILE } from '../../scripts/openapi.js';
import { SwitchableStore } from '../support/failing-store.js';
import { makeKeys } from '../support/keys.js';
import { answerChecker, type AnswerCheck, type LiveAnswer } from '../support/openapi-answers.js';
import { depositJson } from '../support/payloads.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv, startTestSidecar, untilInFlight, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';
import { scratchDir } from '../support/scratch.js';
import { initToken, newSoftHsm, pkcs11SkipReason, pkcs11ToolKeyPair, removeTokens } from '../support/softhsm.js';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { idempotencyKey } from '../../src/idempotency/key.js';
import type { RedisStateStore } from '../../src/state/redis-store.js';

const DEPOSIT = '/api/v2/transaction/init';
let invoice = 0;
const payment = (): string => depositJson({ invoice_no: `inv-contract-${process.pid}-${++invoice}` });
const newKey = (): string => `contract-${randomUUID()}`;

interface Sent {
  readonly method?: string;
  readonly path?: string;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

/** One request as an internal service sends it (node:http: any Host, any method), and its whole answer. */
function call(proxyUrl: string, sent: Sent = {}): Promise<LiveAnswer> {
  const method = sent.method ?? 'POST';
  const path = sent.path ?? DEPOSIT;
  return new Promise((resolve, reject) => {
    const req = request(`${proxyUrl}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...sent.headers },
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        resolve({ method, path, status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
      );
    });
    req.on('error', reject);
    req.end(sent.body);
  });
}

/** What a raw socket received, parsed: for answers to requests no HTTP client would send (a body cut short). */
function parseRaw(raw: Buffer, method: string, path: string): LiveAnswer {
  const end = raw.indexOf('\r\n\r\n');
  const [statusLine = '', ...lines] = raw.subarray(0, end).toString('latin1').split('\r\n');
  const headers: IncomingHttpHeaders = {};
  for (const line of lines)
    headers[line.slice(0, line.indexOf(':')).toLowerCase()] = line.slice(line.indexOf(':') + 1).trim();
  return { method, path, status: Number(statusLine.split(' ')[1]), headers, body: raw.subarray(end + 4) };
}

/** Sends headers and the start of a body, then `finish` (half-close, or nothing); resolves with all it received. */
function rawPost(
  proxyUrl: string,
  finish: 'half-close' | 'hold',
  declared = 500,
): { received: Promise<Buffer>; destroy(): void } {
  const { hostname, port } = new URL(proxyUrl);
  const socket = connect(Number(port), hostname);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.on('error', () => undefined);
  const received = new Promise<Buffer>((resolve) => socket.on('close', () => resolve(Buffer.concat(chunks))));
  socket.write(
    `POST ${DEPOSIT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n{"amount":`,
  );
  if (finish === 'half-close') socket.end();
  return { received, destroy: () => socket.destroy() };
}

/** The admin listener's reading of a series (`name{labels}`), NaN when absent. */
async function metricValue(w: World, series: string): Promise<number> {
  const text = await (await fetch(`${w.running.sidecar.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
}

/** The egress requests in flight, as the sidecar counts them. */
function inFlightRequests(w: World): Promise<number> {
  return metricValue(w, 'signing_sidecar_in_flight_requests');
}

interface World {
  readonly gateway: RecordingGateway;
  readonly running: TestSidecar;
  readonly check: AnswerCheck;
  readonly proxyUrl: string;
}

/** A recording gateway and a sidecar in front of it; the checker is built from the document that sidecar serves. */
async function world(extra: NodeJS.ProcessEnv = {}, deps: SidecarDeps = {}, ready = true): Promise<World> {
  const keys = await makeKeys();
  const gateway = await new RecordingGateway().start();
  if (!ready) gateway.refusePasswordLogins = true;
  const running = await startTestSidecar(await sidecarEnv(keys, gateway.url, extra), deps);
  opened.push(async () => {
    await running.stop();
    await gateway.stop();
  });
  if (ready) await waitUntilReady(running.sidecar);
  const served = await fetch(`${running.sidecar.adminUrl}/openapi.json`);
  assert.equal(served.status, 200);
  assert.equal(served.headers.get('content-type'), 'application/json');
  return {
    gateway,
    running,
    check: answerChecker((await served.json()) as Record<string, unknown>),
    proxyUrl: running.sidecar.egressUrl,
  };
}
const opened: Array<() => Promise<void>> = [];

/** Asserts the answer has `code` (or is the gateway's, for code undefined) and matches the served document. */
function assertMatches(w: Pick<World, 'check'>, answer: LiveAnswer, code: string | undefined, status?: number): void {
  const text = answer.body.toString('utf8');
  const body = (() => {
    try {
      return JSON.parse(text) as { code?: unknown };
    } catch {
      return {};
    }
  })();
  if (code !== undefined) assert.equal(body.code, code, `${answer.status} ${text}`);
  if (status !== undefined) assert.equal(answer.status, status, text);
  assert.deepEqual(w.check(answer), [], `${answer.method} ${answer.path} ${answer.status} ${text}`);
  driven.add(code ?? 'gateway');
}
const driven = new Set<string>();

/** Codes no test can make the sidecar answer, and why. Empty: each one is driven below. */
const NOT_DRIVABLE: Readonly<Record<string, string>> = {};

let plain: World;
let redis: TestRedis;

before(async () => {
  plain = await world();
});
after(async () => {
  for (const close of opened.reverse()) await close();
  await redis?.close();
});

describe('every answer the sidecar makes matches the OpenAPI document it serves', () => {
  it('the served document, for the default settings, is docs/openapi.json (but for the listener address)', async () => {
    const served = (await (await fetch(`${plain.running.sidecar.adminUrl}/openapi.json`)).json()) as Record<
      string,
      unknown
    >;
    const committed = JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as Record<string, unknown>;
    assert.deepEqual(served.servers, [{ ...(committed.servers as object[])[0], url: plain.proxyUrl }]);
    assert.deepEqual({ ...served, servers: [] }, { ...committed, servers: [] });
  });

  it('a document for configured routes: SIDECAR_SIGNED_ROUTES and SIDECAR_IDEMPOTENCY_REQUIRED reflected', async () => {
    const w = await world({
      SIDECAR_SIGNED_ROUTES: '/api/v2/transaction/init,/api/v9/refund/init',
      SIDECAR_IDEMPOTENCY_REQUIRED: 'true',
    });
    const doc = (await (await fetch(`${w.running.sidecar.adminUrl}/openapi.json`)).json()) as {
      paths: Record<string, unknown>;
      components: { parameters: Record<string, { required: boolean }> };
    };
    assert.deepEqual(Object.keys(doc.paths), ['/api/v2/transaction/init', '/api/v9/refund/init']);
    assert.equal(doc.components.parameters['Idempotency-Key']?.required, true);
    const required = await call(w.proxyUrl, { body: payment() });
    assertMatches(w, required, 'sidecar.idempotency.key_required', 428);
  });

  it('refusals on the headers and the body', async () => {
    const { proxyUrl } = plain;
    assertMatches(
      plain,
      await call(proxyUrl, { headers: { host: 'rebound.example' }, body: payment() }),
      'sidecar.request.forbidden_host',
      421,
    );
    assertMatches(
      plain,
      await call(proxyUrl, { path: '/elsewhere', headers: { host: 'rebound.example' } }),
      'sidecar.request.forbidden_host',
      421,
    );
    assertMatches(
      plain,
      await call(proxyUrl, { headers: { origin: 'http://page.example' }, body: payment() }),
      'sidecar.request.browser_origin',
      403,
    );
    // An expectation other than 100-continue (Node's own answer would be a bare 417), on a signed route or not.
    for (const path of [DEPOSIT, '/elsewhere'])
      assertMatches(
        plain,
        await call(proxyUrl, { path, headers: { expect: 'x-deliver-later' }, body: payment() }),
        'sidecar.request.expectation_failed',
        417,
      );
    assertMatches(
      plain,
      await call(proxyUrl, { path: '/api/v2/elsewhere', body: payment() }),
      'sidecar.route.not_found',
      404,
    );
    const notAllowed = await call(proxyUrl, { method: 'GET' });
    assertMatches(plain, notAllowed, 'sidecar.method.not_allowed', 405);
    assert.equal(notAllowed.headers.allow, 'POST');
    assertMatches(
      plain,
      await call(proxyUrl, { headers: { 'content-type': 'text/plain' }, body: payment() }),
      'sidecar.body.unsupported_media_type',
      415,
    );
    assertMatches(plain, await call(proxyUrl, { body: '{"amount":' }), 'sidecar.body.invalid_json', 400);
    assertMatches(plain, await call(proxyUrl, { body: '["not", "an object"]' }), 'sidecar.body.not_object', 400);
    assertMatches(
      plain,
      await call(proxyUrl, { body: depositJson({ pad: 'x'.repeat(1_100_000) }) }),
      'sidecar.body.too_large',
      413,
    );
    assertMatches(
      plain,
      await call(proxyUrl, { headers: { 'idempotency-key': 'has space' }, body: payment() }),
      'sidecar.idempotency.key_invalid',
      400,
    );
    // A caller that half-closes mid-body can still read; one that resets cannot (its log line says delivered: false).
    const cut = parseRaw(await rawPost(proxyUrl, 'half-close').received, 'POST', DEPOSIT);
    assertMatches(plain, cut, 'sidecar.body.incomplete', 400);
    assert.equal(plain.gateway.requests.length, 0, 'none of them reached the gateway');
  });

  it("the gateway's answers passed through, a replay, a 409 while the first is in flight, a reused key", async () => {
    const { proxyUrl, gateway } = plain;
    assertMatches(plain, await call(proxyUrl, { body: payment() }), undefined, 201);
    gateway.script.push({ status: 401, body: { code: 'signature.verify.failed', message: 'no' } });
    assertMatches(plain, await call(proxyUrl, { body: payment() }), 'signature.verify.failed', 401);
    gateway.script.push({ status: 502, body: { code: 'upstream', message: 'the gateway says 502' } });
    assertMatches(plain, await call(proxyUrl, { body: payment() }), 'upstream', 502);
    gateway.script.push({ status: 503, body: '<html>busy</html>' });
    assertMatches(plain, await call(proxyUrl, { body: payment() }), undefined, 503);

    const key = newKey();
    const body = payment();
    gateway.holdUntil = Number.POSITIVE_INFINITY;
    const first = call(proxyUrl, { headers: { 'idempotency-key': key }, body });
    await waitFor('the first request reaches the gateway', () => gateway.requests.length === 5, 5_000);
    const inFlight = await call(proxyUrl, { headers: { 'idempotency-key': key }, body });
    assertMatches(plain, inFlight, 'sidecar.idempotency.in_progress', 409);
    assert.equal(inFlight.headers['retry-after'], '1');
    gateway.holdUntil = 0;
    gateway.release();
    assertMatches(plain, await first, undefined, 201);
    const replay = await call(proxyUrl, { headers: { 'idempotency-key': key }, body });
    assertMatches(plain, replay, undefined, 201);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    driven.add('replay');
    assertMatches(
      plain,
      await call(proxyUrl, { headers: { 'idempotency-key': key }, body: payment() }),
      'sidecar.idempotency.key_reused',
      422,
    );
  });

  it('failures upstream: outcome_unknown 502 and 504 (and replayed), unreachable', async () => {
    const w = await world({
      SIDECAR_UPSTREAM_CONNECTIONS: '1',
      SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS: '100',
      SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS: '300',
      SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS: '1500',
    });
    w.gateway.script.push({ reset: true });
    const key = newKey();
    const body = payment();
    const reset = await call(w.proxyUrl, { headers: { 'idempotency-key': key }, body });
    assertMatches(w, reset, 'sidecar.upstream.outcome_unknown', 502);
    const replayed = await call(w.proxyUrl, { headers: { 'idempotency-key': key }, body });
    assertMatches(w, replayed, 'sidecar.upstream.outcome_unknown', 502);
    assert.equal(replayed.headers['idempotent-replayed'], 'true');
    // One gateway connection, held by a request the gateway never answers: the next gets no connection in time.
    w.gateway.script.push({ hang: true });
    const hanging = call(w.proxyUrl, { body: payment() });
    await waitFor('the hanging request reaches the gateway', () => w.gateway.requests.length === 2, 5_000);
    assertMatches(w, await call(w.proxyUrl, { body: payment() }), 'sidecar.upstream.unreachable', 502);
    assertMatches(w, await hanging, 'sidecar.upstream.outcome_unknown', 504);
  });

  it('no token: token.unavailable', async () => {
    const w = await world({}, {}, false);
    await waitFor('the refused login', () => w.gateway.grants.length >= 1, 5_000);
    assertMatches(w, await call(w.proxyUrl, { body: payment() }), 'sidecar.token.unavailable', 503);
  });

  it('the body budget spent: budget_exhausted, with Retry-After', async () => {
    // In a 1 GiB budget the egress pool holds a dozen bodies near the 1 MiB limit (memory/budget.ts): as many callers
    // as fit declare such bodies and hold them; one more does not fit.
    const pool = memoryBudget({
      limitMb: 1024,
      process: readProcessMemory(),
      maxBodyBytes: 1_048_576,
      maxPostbackBodyBytes: POSTBACK_MAX_BODY_BYTES,
    }).egressBodyPoolBytes;
    const fit = Math.floor(pool / (1_000_000 - EGRESS_FREE_BODY_BYTES));
    assert.ok(fit >= 1, `the pool (${pool} bytes) holds one body at the limit`);
    const w = await world({ SIDECAR_MEMORY_LIMIT_MB: '1024' });
    const holders = Array.from({ length: fit }, () => rawPost(w.proxyUrl, 'hold', 1_000_000));
    try {
      // The one more is refused at once, unread: its answer arrives and the connection is closed.
      await waitFor('the holders in flight', async () => (await inFlightRequests(w)) === fit, 5_000);
      const refused = rawPost(w.proxyUrl, 'hold', 1_000_000);
      const answer = parseRaw(await refused.received, 'POST', DEPOSIT);
      assertMatches(w, answer, 'sidecar.body.budget_exhausted', 503);
      assert.equal(answer.headers['retry-after'], '1');
    } finally {
      for (const holder of holders) holder.destroy();
    }
  });

  it('near the memory limit: overloaded, with Retry-After, nothing sent', async () => {
    // The smallest budget the settings take (113 MiB): this test process, the sidecar in it, is past its high-water
    // mark (90 %) once it holds that much; the memory held here makes sure of it.
    const held = Buffer.alloc(Math.max(0, 110 * 1024 * 1024 - process.memoryUsage.rss()), 1);
    try {
      const w = await world({ SIDECAR_MEMORY_LIMIT_MB: '113' });
      await waitFor('shedding', async () => (await metricValue(w, 'signing_sidecar_memory_shedding')) === 1, 5_000);
      const answer = await call(w.proxyUrl, { body: payment(), headers: { 'idempotency-key': newKey() } });
      assertMatches(w, answer, 'sidecar.overloaded', 503);
      assert.equal(answer.headers['retry-after'], '1');
      assert.equal(w.gateway.requests.length, 0, 'nothing sent');
      assert.equal(await metricValue(w, 'signing_sidecar_requests_shed_total{listener="egress"}'), 1);
    } finally {
      held.fill(0);
    }
  });

  it('the signing token gone (signer.unavailable), with nothing sent', { skip: pkcs11SkipReason() }, async () => {
    // A SoftHSM2 token of this test's own; the sidecar runs in this process, and SoftHSM2 reads its configuration
    // from the environment at C_Initialize.
    const hsm = newSoftHsm();
    process.env.SOFTHSM2_CONF = hsm.env.SOFTHSM2_CONF;
    const token = { label: 'contract', pin: '135790' };
    initToken(hsm, token.label, token.pin);
    pkcs11ToolKeyPair(hsm, token, { label: 'payments', id: 'c1', bits: 2048 });
    const pinFile = join(scratchDir('contract-pin-'), 'pin');
    writeFileSync(pinFile, `${token.pin}\n`, { mode: 0o600 });
    const w = await world({
      SIDECAR_PRIVATE_KEY_FILE: undefined,
      SIDECAR_SIGNER: 'pkcs11',
      SIDECAR_PKCS11_MODULE: hsm.module,
      SIDECAR_PKCS11_TOKEN_LABEL: token.label,
      SIDECAR_PKCS11_KEY_LABEL: 'payments',
      SIDECAR_PKCS11_PIN_FILE: pinFile,
    });
    const restore = removeTokens(hsm);
    try {
      // A session already open may still sign once; the token's absence is found by the next signature at the latest.
      const answers = [await call(w.proxyUrl, { body: payment() })];
      while (answers.at(-1)?.status !== 503 && answers.length < 20)
        answers.push(await call(w.proxyUrl, { body: payment() }));
      assertMatches(w, answers.at(-1)!, 'sidecar.signer.unavailable', 503);
      const signed = w.gateway.requests.filter((r) => r.url !== '/api/v2/auth/token').length;
      assert.equal(signed, answers.length - 1, 'the payment refused 503 never reached the gateway');
    } finally {
      restore();
    }
  });

  it('the idempotency store down (unavailable) or failing in a way it never should (internal)', async () => {
    let switchable: SwitchableStore | undefined;
    let broken = false;
    const w = await world(
      {},
      {
        wrapStore: (store: StateStore) => {
          switchable = new SwitchableStore(store);
          // The claim's write.
          const original = switchable.writeIf.bind(switchable);
          switchable.writeIf = (conditions, writes, options) =>
            broken ? Promise.reject(new TypeError('a bug in the store')) : original(conditions, writes, options);
          return switchable;
        },
      },
    );
    switchable!.down = true;
    assertMatches(
      w,
      await call(w.proxyUrl, { headers: { 'idempotency-key': newKey() }, body: payment() }),
      'sidecar.idempotency.unavailable',
      503,
    );
    switchable!.down = false;
    broken = true;
    assertMatches(
      w,
      await call(w.proxyUrl, { headers: { 'idempotency-key': newKey() }, body: payment() }),
      'sidecar.internal',
      500,
    );
  });

  it('money limits: exceeded (one payment, a window), an amount not countable, the store away', async () => {
    const limitsFile = join(scratchDir('contract-limits-'), 'limits.yaml');
    await writeFile(
      limitsFile,
      `rules: [{ name: deposits-usd, route: ${DEPOSIT}, currency: USD, maxAmount: "100.00",
                windows: [{ period: 1h, maxTotal: "150.00" }] }]\n`,
    );
    let switchable: SwitchableStore | undefined;
    const w = await world(
      { SIDECAR_LIMITS_FILE: limitsFile },
      { wrapStore: (store: StateStore) => (switchable = new SwitchableStore(store)) },
    );
    const deposit = (amount: string) =>
      call(w.proxyUrl, { body: depositJson({ amount, invoice_no: `lim-${++invoice}` }) });
    const above = await deposit('100.01');
    assertMatches(w, above, 'sidecar.limit.exceeded', 403);
    assert.equal((JSON.parse(above.body.toString('utf8')) as { window: string }).window, 'payment');
    assertMatches(w, await deposit('100.00'), undefined, 201);
    assertMatches(w, await deposit('50.01'), 'sidecar.limit.exceeded', 403);
    assertMatches(w, await deposit('1.005'), 'sidecar.limit.amount_invalid', 400);
    switchable!.down = true;
    assertMatches(w, await deposit('1.00'), 'sidecar.limit.unavailable', 503);
    assert.equal(w.gateway.requests.length, 1, 'only the one payment within the limits reached the gateway');
  });

  it('shutdown while a body is arriving: shutdown.draining', async () => {
    const w = await world({ SIDECAR_SHUTDOWN_MAX_DELAY_MS: '300' });
    const arriving = rawPost(w.proxyUrl, 'hold');
    await untilInFlight(w.running, 1);
    await w.running.stop();
    assertMatches(w, parseRaw(await arriving.received, 'POST', DEPOSIT), 'sidecar.shutdown.draining', 503);
  });

  it('a claim taken over while its request waited for a connection: claim_lost, nothing sent', async () => {
    const w = await world({ SIDECAR_UPSTREAM_CONNECTIONS: '1' });
    const signed = () => w.gateway.requests.filter((r) => r.url !== '/api/v2/auth/token').length;
    w.gateway.holdUntil = Number.POSITIVE_INFINITY;
    const blocker = call(w.proxyUrl, { body: payment() });
    await waitFor('the blocker at the gateway', () => signed() === 1);
    const key = newKey();
    const storeKey = `idempotency:${idempotencyKey(key)!.sha256}`;
    const lost = call(w.proxyUrl, { headers: { 'idempotency-key': key }, body: payment() });
    const { store } = w.running.sidecar;
    await waitFor('the claim', async () => (await store.get(storeKey)) !== undefined);
    // What the store shows after another replica took the claim over: the record is no longer this claim's.
    const claimed = (await store.get(storeKey))!;
    const other = claimed.replace(/"claim":"[^"]+"/, '"claim":"another-replicas"');
    assert.equal(await store.compareAndSet(storeKey, claimed, other, 600_000), true);
    w.gateway.release(); // the connection is free: the fence runs, and fails
    assertMatches(w, await lost, 'sidecar.idempotency.claim_lost', 409);
    await blocker;
    assert.equal(signed(), 1, 'the payment whose claim was lost never reached the gateway');
    w.gateway.holdUntil = 0;
  });

  it('a forged idempotency record on Redis: record_unverified', async () => {
    redis = await startRedis();
    const keys = await makeKeys();
    const macKeyFile = join(keys.dir, 'state-mac-key');
    await writeFile(macKeyFile, `${Buffer.alloc(32, 7).toString('base64')}\n`, { mode: 0o600 });
    const w = await world({
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
      SIDECAR_STATE_MAC_KEY_FILE: macKeyFile,
    });
    const key = newKey();
    const stored = (w.running.sidecar.store as RedisStateStore).storedKey(`idempotency:${idempotencyKey(key)!.sha256}`);
    await redis.cli('SET', stored, 'written by someone else', 'PX', '600000');
    assertMatches(
      w,
      await call(w.proxyUrl, { headers: { 'idempotency-key': key }, body: payment() }),
      'sidecar.idempotency.record_unverified',
      500,
    );
  });

  it('every code of the catalogue was driven above, and the gateway answers and a replay', () => {
    const missing = errorCatalogue()
      .map((entry) => entry.code)
      .filter((code) => !driven.has(code) && NOT_DRIVABLE[code] === undefined);
    assert.deepEqual(
      missing,
      [],
      'codes of src/errors.ts with no case in this file: add one (or say in NOT_DRIVABLE why not)',
    );
    assert.ok(driven.has('gateway') && driven.has('replay'));
  });
});
