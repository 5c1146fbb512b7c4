// Egress through the site's forward proxy (docs/operations.md, "Egress through a forward proxy"), with a real
// Squid between the sidecar and the simulator in TLS mode: signatures still verify (the proxy is not in the signed
// URL), one CONNECT per pooled connection, Basic authentication with a password file that rotates, and the money
// rules through the tunnel: a proxy that is down or refuses the CONNECT means nothing was sent (retried, then
// `unreachable`), a tunnel cut after the request went in means `outcome_unknown`, never a second payment. An
// https:// proxy (TLS to Squid itself, the CONNECT inside it) is trusted by SIDECAR_UPSTREAM_PROXY_CA_FILE only.
import assert from 'node:assert/strict';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { CuttingProxy } from '../support/cutting-proxy.js';
import { freeStablePort } from '../support/free-port.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { deposit, postJson, type Answer } from '../support/sim-world.js';
import { scratchDir } from '../support/scratch.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { startSquid, type TestSquid } from '../support/squid.js';
import { generateTlsMaterial } from '../../packages/simulator/src/tls.js';
import { ApplicationStub } from '../postback/support.js';
import { waitFor } from '../support/wait-for.js';

const FAST = {
  SIDECAR_SECRET_POLL_INTERVAL_MS: '100',
  SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS: '1500',
  SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS: '2000',
};

interface World {
  readonly keys: TestKeys;
  readonly simulator: RunningSimulator;
  readonly caFile: string;
  readonly gatewayTarget: string;
}

async function gatewayWorld(webhookUrl?: string): Promise<World> {
  const keys = await makeKeys();
  const account = { username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem };
  const simulator = await startSimulator({
    accounts: [webhookUrl === undefined ? account : { ...account, webhookUrl, signedPostbacks: true }],
    tls: true,
    postbackRetry: { initialDelayMs: 100, maxDelayMs: 200 },
  });
  const caFile = join(keys.dir, 'gateway-ca.pem');
  await writeFile(caFile, simulator.caPem!);
  return { keys, simulator, caFile, gatewayTarget: `127.0.0.1:${simulator.port}` };
}

async function passwordFile(dir: string, value: string): Promise<string> {
  const file = join(dir, 'proxy-password');
  await writeFile(file, `${value}\n`, { mode: 0o600 });
  return file;
}

/** Replaced in one step, as a mounted Secret is. */
async function replaceFile(file: string, text: string): Promise<void> {
  await writeFile(`${file}.next`, text, { mode: 0o600 });
  await rename(`${file}.next`, file);
}

async function metricsText(running: TestSidecar): Promise<string> {
  return (await fetch(`${running.sidecar.adminUrl}/metrics`)).text();
}

function requestLine(running: TestSidecar, requestId: string | null): Record<string, unknown> {
  const line = running.logs.lines().find((l) => l.event === 'request' && l.requestId === requestId);
  assert.ok(line, `a request log line for ${requestId}`);
  return line;
}

function invoiceOf(payload: string): string {
  return (JSON.parse(payload) as { invoice_no: string }).invoice_no;
}

function transactionsFor(simulator: RunningSimulator, payload: string): number {
  const invoice = invoiceOf(payload);
  return simulator.transactions().filter((tx) => tx.invoice_no === invoice).length;
}

function body(answer: Answer): { code: string; retryable: boolean } {
  return JSON.parse(answer.body) as { code: string; retryable: boolean };
}

describe('through a real Squid with Basic authentication', () => {
  let world: World;
  let squid: TestSquid;
  let running: TestSidecar;
  let application: ApplicationStub;
  let proxyPasswordFile: string;

  before(async () => {
    application = await new ApplicationStub().start();
    const postbackPort = await freeStablePort();
    const webhookUrl = `http://127.0.0.1:${postbackPort}/hooks/payments`;
    world = await gatewayWorld(webhookUrl);
    squid = await startSquid({ gatewayPort: world.simulator.port, auth: true });
    proxyPasswordFile = await passwordFile(scratchDir('proxy-secret-'), squid.password!);
    const postbackKeyFile = join(world.keys.dir, 'gateway-postback.pub.pem');
    await writeFile(postbackKeyFile, world.simulator.postbackPublicKeyPem);
    running = await startTestSidecar(
      await sidecarEnv(world.keys, world.simulator.baseUrl, {
        ...FAST,
        SIDECAR_UPSTREAM_CA_FILE: world.caFile,
        SIDECAR_UPSTREAM_PROXY_URL: squid.url,
        SIDECAR_UPSTREAM_PROXY_USERNAME: squid.username,
        SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: proxyPasswordFile,
        SIDECAR_UPSTREAM_CONNECTIONS: '3',
        // Long enough that pooled tunnels stay up for the whole burst below.
        SIDECAR_UPSTREAM_KEEPALIVE_TIMEOUT_MS: '4000',
        SIDECAR_POSTBACK_FORWARD_URL: application.url,
        SIDECAR_POSTBACK_PUBLIC_URL: webhookUrl,
        SIDECAR_POSTBACK_PUBLIC_KEY_FILE: postbackKeyFile,
        SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
        SIDECAR_POSTBACK_LISTEN_PORT: String(postbackPort),
      }),
    );
    await waitUntilReady(running.sidecar);
  });
  after(async () => {
    await running?.stop();
    await squid?.close();
    await world?.simulator.close();
    await application?.stop();
  });

  it('deposits verify at the gateway; one CONNECT per pooled connection, none for metrics or postbacks', async () => {
    const payloads = Array.from({ length: 24 }, () => deposit());
    const answers: Answer[] = [];
    // Bursts of three: the three pooled connections, each its own tunnel, reused from then on.
    for (let i = 0; i < payloads.length; i += 3) {
      answers.push(...(await Promise.all(payloads.slice(i, i + 3).map((p) => postJson(running.sidecar.egressUrl, p)))));
    }
    for (const answer of answers) assert.equal(answer.status, 200, answer.body);
    for (const payload of payloads) assert.equal(transactionsFor(world.simulator, payload), 1);
    // A postback: the gateway calls the receiver, which delivers to the application; neither goes through the forward
    // proxy.
    const id = (JSON.parse(answers[0]!.body) as { transaction_id: string }).transaction_id;
    await world.simulator.complete(id, 'SUCCESS');
    await waitFor(
      'the postback',
      () => world.simulator.postbacks().some((a) => a.transactionId === id && a.delivered),
      10_000,
    );
    assert.match(await metricsText(running), /signing_sidecar_requests_total/);
    // Squid writes a tunnel's line when it closes: close the pooled connections first.
    await running.stop();
    await waitFor('the tunnels to close', async () => (await squid.connects()).length >= 1, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const connects = await squid.connects();
    assert.ok(connects.length >= 1 && connects.length <= 3, `at most one CONNECT per connection: ${connects.length}`);
    for (const line of connects) {
      assert.deepEqual(line, { status: 200, target: world.gatewayTarget, user: squid.username }, 'only the gateway');
    }
    const other = (await squid.accessLog()).filter((line) => !line.includes('error:transaction-end-before-headers'));
    assert.equal(other.length, connects.length, `nothing but the tunnels went through Squid: ${other.join('\n')}`);
  });
});

describe('proxy failures before the tunnel: nothing sent, retried, then unreachable', () => {
  let world: World;
  let squid: TestSquid;
  let running: TestSidecar;
  let proxyPasswordFile: string;

  before(async () => {
    world = await gatewayWorld();
    squid = await startSquid({ gatewayPort: world.simulator.port, auth: true });
    proxyPasswordFile = await passwordFile(scratchDir('proxy-secret-'), squid.password!);
    running = await startTestSidecar(
      await sidecarEnv(world.keys, world.simulator.baseUrl, {
        ...FAST,
        SIDECAR_UPSTREAM_CA_FILE: world.caFile,
        SIDECAR_UPSTREAM_PROXY_URL: squid.url,
        SIDECAR_UPSTREAM_PROXY_USERNAME: squid.username,
        SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: proxyPasswordFile,
        // Idle tunnels close at once: each request below opens its own, with the settings of the moment.
        SIDECAR_UPSTREAM_KEEPALIVE_TIMEOUT_MS: '1',
      }),
    );
    await waitUntilReady(running.sidecar);
  });
  after(async () => {
    await running?.stop();
    await squid?.close();
    await world?.simulator.close();
  });

  const unreachable = async (causeCode: string): Promise<void> => {
    const before = world.simulator.transactions().length;
    const payload = deposit();
    const answer = await postJson(running.sidecar.egressUrl, payload);
    assert.equal(answer.status, 502, answer.body);
    assert.deepEqual(
      { code: body(answer).code, retryable: body(answer).retryable },
      { code: 'sidecar.upstream.unreachable', retryable: true },
    );
    const line = requestLine(running, answer.requestId);
    assert.equal(line.causeCode, causeCode);
    assert.equal(line.causeFamily, 'proxy');
    assert.equal(line.attempts, 0, 'no copy reached the gateway');
    assert.equal(world.simulator.transactions().length, before, 'nothing reached the gateway');
    assert.equal(transactionsFor(world.simulator, payload), 0);
  };
  const retries = async (): Promise<number> =>
    Number(/^signing_sidecar_retries_total\{reason="connect_failed"\} (\d+)$/m.exec(await metricsText(running))?.[1]);

  it('a wrong proxy password: 407, retried within the deadline, then 502 unreachable; the rotated file heals it', async () => {
    assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200, 'the right password works');
    const wrong = `not-${squid.password!}`;
    await replaceFile(proxyPasswordFile, `${wrong}\n`);
    const reloaded = async (n: number) =>
      new RegExp(`setting="upstream_proxy_password",outcome="success"\\} ${n}$`, 'm').test(await metricsText(running));
    await waitFor('the password reload', () => reloaded(1), 10_000);
    const retriedBefore = await retries();
    await unreachable('ERR_PROXY_AUTH_REQUIRED');
    assert.ok((await retries()) > retriedBefore, 'retried within the deadline');
    const refused = (await squid.connects()).filter((line) => line.status === 407);
    assert.ok(refused.length >= 2, `Squid answered 407 to each attempt: ${refused.length}`);
    assert.match(
      await metricsText(running),
      /^signing_sidecar_upstream_failures_total\{cause_family="proxy",outcome="not_sent"\} [1-9]\d*$/m,
    );
    // The right password again: no restart, the next tunnel authenticates.
    await replaceFile(proxyPasswordFile, `${squid.password!}\n`);
    await waitFor('the second password reload', () => reloaded(2), 10_000);
    assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200, 'healed without a restart');
    // Neither password, nor the Basic credentials built from them, in any log line, answer or metric.
    const metrics = await metricsText(running);
    for (const secret of [squid.password!, wrong]) {
      const basic = Buffer.from(`${squid.username!}:${secret}`).toString('base64');
      for (const [where, text] of [
        ['logs', running.logs.text],
        ['metrics', metrics],
      ] as const) {
        assert.ok(!text.includes(secret), `the proxy password is not in the ${where}`);
        assert.ok(!text.includes(basic), `the Basic credentials are not in the ${where}`);
      }
    }
  });

  it('a proxy refusing CONNECT to the gateway (403): unreachable, ERR_PROXY_REFUSED', async () => {
    await squid.allowPort(world.simulator.port + 1, world.simulator.port, 403);
    try {
      await unreachable('ERR_PROXY_REFUSED');
    } finally {
      await squid.allowPort(world.simulator.port, world.simulator.port, 200);
    }
    assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200, 'allowed again');
  });

  it('a proxy that is down: unreachable, ERR_PROXY_UNREACHABLE, nothing sent', async () => {
    await squid.close();
    await unreachable('ERR_PROXY_UNREACHABLE');
  });
});

/** How many CONNECT lines Squid has written, once no new one came for half a second (the earlier tunnels closed). */
async function settledConnects(squid: TestSquid): Promise<number> {
  let count = (await squid.connects()).length;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const now = (await squid.connects()).length;
    if (now === count) return count;
    count = now;
  }
}

describe('an https:// proxy: TLS to Squid itself, then the tunnel', () => {
  let world: World;
  let squid: TestSquid;
  let proxyCaFile: string;
  let otherCaFile: string;

  before(async () => {
    world = await gatewayWorld();
    // Squid's certificate, for 127.0.0.1, from a CA of its own (a corporate proxy's private CA); another CA beside.
    const [proxyTls, other] = await Promise.all([generateTlsMaterial(), generateTlsMaterial()]);
    const dir = scratchDir('proxy-ca-');
    [proxyCaFile, otherCaFile] = [join(dir, 'proxy-ca.pem'), join(dir, 'other-ca.pem')];
    await writeFile(proxyCaFile, proxyTls.caPem!);
    await writeFile(otherCaFile, other.caPem!);
    // https_port only: Squid has no plain port, so a CONNECT that is not inside TLS gets no answer at all.
    squid = await startSquid({ gatewayPort: world.simulator.port, auth: true, tls: proxyTls });
  });
  after(async () => {
    await squid?.close();
    await world?.simulator.close();
  });

  /** A sidecar through the TLS Squid, trusting the CA in `caFile` for Squid's certificate; stopped after `body`. */
  const withSidecar = async (caFile: string, body: (running: TestSidecar) => Promise<void>): Promise<void> => {
    const running = await startTestSidecar(
      await sidecarEnv(world.keys, world.simulator.baseUrl, {
        ...FAST,
        SIDECAR_UPSTREAM_CA_FILE: world.caFile,
        SIDECAR_UPSTREAM_PROXY_URL: squid.url,
        SIDECAR_UPSTREAM_PROXY_CA_FILE: caFile,
        SIDECAR_UPSTREAM_PROXY_USERNAME: squid.username,
        SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: await passwordFile(scratchDir('proxy-secret-'), squid.password!),
        // Idle tunnels close at once: each request below opens its own, with the CA of the moment.
        SIDECAR_UPSTREAM_KEEPALIVE_TIMEOUT_MS: '1',
      }),
    );
    try {
      await waitUntilReady(running.sidecar, 15_000);
      await body(running);
    } finally {
      await running.stop();
    }
  };

  it('trusted by SIDECAR_UPSTREAM_PROXY_CA_FILE: deposits verify at the gateway, the CONNECTs authenticated', async () => {
    assert.match(squid.url, /^https:\/\//);
    const payloads = [deposit(), deposit(), deposit()];
    await withSidecar(proxyCaFile, async (running) => {
      for (const payload of payloads) {
        const answer = await postJson(running.sidecar.egressUrl, payload);
        assert.equal(answer.status, 200, answer.body);
      }
    });
    for (const payload of payloads) assert.equal(transactionsFor(world.simulator, payload), 1);
    // The token grant's tunnel and one per deposit (Squid writes a tunnel's line when it closes).
    await waitFor('the tunnel lines', async () => (await squid.connects()).length >= 4, 10_000);
    for (const line of await squid.connects()) {
      assert.deepEqual(line, { status: 200, target: world.gatewayTarget, user: squid.username }, 'only the gateway');
    }
  });

  it('a proxy certificate that does not verify: refused, unreachable, nothing sent, no CONNECT reaches Squid', async () => {
    const dir = scratchDir('proxy-ca-rotated-');
    const caFile = join(dir, 'proxy-ca.pem');
    await writeFile(caFile, await readFile(proxyCaFile, 'utf8'));
    await withSidecar(caFile, async (running) => {
      assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200, 'trusted: through Squid');
      // The CA file now names another CA (a proxy whose certificate changed, or a wrong file mounted): from the next
      // tunnel on, Squid's certificate does not verify.
      await replaceFile(caFile, await readFile(otherCaFile, 'utf8'));
      await waitFor(
        'the proxy CA reload',
        async () => /setting="upstream_proxy_ca",outcome="success"\} 1$/m.test(await metricsText(running)),
        10_000,
      );
      const connectsBefore = await settledConnects(squid);
      const transactionsBefore = world.simulator.transactions().length;
      const payload = deposit();
      const answer = await postJson(running.sidecar.egressUrl, payload);
      assert.equal(answer.status, 502, answer.body);
      assert.deepEqual(
        { code: body(answer).code, retryable: body(answer).retryable },
        { code: 'sidecar.upstream.unreachable', retryable: true },
      );
      const line = requestLine(running, answer.requestId);
      assert.equal(line.causeCode, 'ERR_PROXY_UNREACHABLE');
      assert.equal(line.causeFamily, 'proxy');
      assert.equal(line.attempts, 0, 'no copy reached the gateway');
      assert.equal(transactionsFor(world.simulator, payload), 0);
      assert.equal(world.simulator.transactions().length, transactionsBefore, 'nothing reached the gateway');
      assert.match(
        await metricsText(running),
        /^signing_sidecar_upstream_failures_total\{cause_family="proxy",outcome="not_sent"\} [1-9]\d*$/m,
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal((await squid.connects()).length, connectsBefore, 'no CONNECT (nor its credentials) was sent');
    });
  });
});

describe('a tunnel cut after the request went in', () => {
  let world: World;
  let proxy: CuttingProxy;
  let running: TestSidecar;

  before(async () => {
    world = await gatewayWorld();
    proxy = await new CuttingProxy().start();
    running = await startTestSidecar(
      await sidecarEnv(world.keys, world.simulator.baseUrl, {
        ...FAST,
        SIDECAR_UPSTREAM_CA_FILE: world.caFile,
        SIDECAR_UPSTREAM_PROXY_URL: proxy.url,
      }),
    );
    await waitUntilReady(running.sidecar);
  });
  after(async () => {
    await running?.stop();
    await proxy?.stop();
    await world?.simulator.close();
  });

  it('is outcome_unknown, never resent: the gateway got the payment exactly once', async () => {
    assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200, 'through the tunnel');
    proxy.cutNextRequest();
    const payload = deposit();
    const answer = await postJson(running.sidecar.egressUrl, payload);
    assert.equal(proxy.cuts, 1);
    assert.equal(answer.status, 502, answer.body);
    assert.deepEqual(
      { code: body(answer).code, retryable: body(answer).retryable },
      { code: 'sidecar.upstream.outcome_unknown', retryable: false },
    );
    const line = requestLine(running, answer.requestId);
    assert.equal(line.attempts, 1);
    await waitFor('the gateway to record it', () => transactionsFor(world.simulator, payload) === 1, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(transactionsFor(world.simulator, payload), 1, 'sent once, never twice');
    const counts = new Map<string, number>();
    for (const tx of world.simulator.transactions()) counts.set(tx.invoice_no, (counts.get(tx.invoice_no) ?? 0) + 1);
    assert.deepEqual(
      [...counts.values()].filter((n) => n > 1),
      [],
      '0 payments sent twice',
    );
    assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200, 'the next one goes through');
  });
});

describe('SIDECAR_UPSTREAM_PROXY_FROM_ENV: HTTPS_PROXY and NO_PROXY', () => {
  let world: World;
  let squid: TestSquid;

  before(async () => {
    world = await gatewayWorld();
    squid = await startSquid({ gatewayPort: world.simulator.port });
  });
  after(async () => {
    await squid?.close();
    await world?.simulator.close();
  });

  const depositWith = async (env: NodeJS.ProcessEnv): Promise<void> => {
    const running = await startTestSidecar(
      await sidecarEnv(world.keys, world.simulator.baseUrl, {
        ...FAST,
        SIDECAR_UPSTREAM_CA_FILE: world.caFile,
        SIDECAR_UPSTREAM_PROXY_FROM_ENV: 'true',
        ...env,
      }),
    );
    try {
      await waitUntilReady(running.sidecar);
      assert.equal((await postJson(running.sidecar.egressUrl, deposit())).status, 200);
    } finally {
      await running.stop();
    }
  };

  it('NO_PROXY covering the gateway: a direct connection, Squid sees nothing', async () => {
    await depositWith({ HTTPS_PROXY: squid.url, NO_PROXY: 'example.com, 127.0.0.1' });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(await squid.connects(), []);
  });

  it('HTTPS_PROXY alone: through Squid', async () => {
    await depositWith({ HTTPS_PROXY: squid.url, NO_PROXY: 'example.com' });
    await waitFor('the tunnel line', async () => (await squid.connects()).length === 1, 10_000);
    assert.equal((await squid.connects())[0]?.target, world.gatewayTarget);
  });
});
