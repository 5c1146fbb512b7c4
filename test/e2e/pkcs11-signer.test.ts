// The PKCS#11 signer against a real SoftHSM2: keys made inside the token by `keygen --pkcs11` and by
// opensc's pkcs11-tool, signatures checked by openssl, the start-time refusals, the token taken away and given back
// under traffic, 64 requests at once, the PIN file rotated. The tokens live in this file's own SOFTHSM2_CONF.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { check } from '../../src/cli/check.js';
import { keygen } from '../../src/cli/keygen.js';
import { serve } from '../../src/cli/serve.js';
import { sign } from '../../src/cli/sign.js';
import type { Pkcs11SignerConfig } from '../../src/config/signer-settings.js';
import { Secret } from '../../src/config/secret.js';
import { ConfigError } from '../../src/errors.js';
import { loadPkcs11Binding, type Pkcs11Binding } from '../../src/signing/pkcs11-binding.js';
import { startPkcs11Signer } from '../../src/signing/pkcs11-signer.js';
import { createSigner } from '../../src/signing/signer.js';
import { RecordingGateway, TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { scratchDir } from '../support/scratch.js';
import { spawnSidecar } from '../support/spawned-sidecar.js';
import { startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import {
  changePin,
  decryptOnlyKeyPair,
  importPrivateKey,
  initToken,
  newSoftHsm,
  pkcs11SkipReason,
  pkcs11ToolKeyPair,
  removeTokens,
  type SoftHsm,
} from '../support/softhsm.js';
import { runCommand } from '../tools/run-command.js';

const skip = pkcs11SkipReason();
const TOKEN = { label: 'sidecar-test', pin: '246810' };
const DEPOSIT = '/api/v2/transaction/init';
const WITHDRAWAL = '/api/v2/transfer-out/init';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let hsm: SoftHsm;
let dir: string;
let pinFile: string;
/** The public key PEM that `keygen --pkcs11` printed for the account manager. */
let keygenPublicPem: string;

function pkcs11Env(gatewayUrl: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    SIDECAR_BASE_URL: gatewayUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: TEST_USERNAME,
    SIDECAR_PASSWORD_FILE: join(dir, 'password'),
    SIDECAR_SIGNER: 'pkcs11',
    SIDECAR_PKCS11_MODULE: hsm.module,
    SIDECAR_PKCS11_TOKEN_LABEL: TOKEN.label,
    SIDECAR_PKCS11_KEY_LABEL: 'payments',
    SIDECAR_PKCS11_PIN_FILE: pinFile,
    SIDECAR_LISTEN_PORT: '0',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_PORT: '0',
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0',
    SIDECAR_SHUTDOWN_MAX_DELAY_MS: '2000',
    SIDECAR_SECRET_POLL_INTERVAL_MS: '200',
    ...hsm.env,
    ...extra,
  };
}

async function post(proxyUrl: string, path: string, payload: unknown): Promise<{ status: number; body: string }> {
  const res = await fetch(`${proxyUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(payload),
    // A sidecar that stops answering fails the test rather than stalling it.
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, body: await res.text() };
}

/** openssl's own verdict on a signature over `message` with a public key file (PEM or DER). */
function opensslVerifies(publicKeyFile: string, message: string, signatureBase64: string, keyform = 'PEM'): boolean {
  const work = scratchDir('openssl-verify-');
  writeFileSync(join(work, 'message'), message);
  writeFileSync(join(work, 'signature'), Buffer.from(signatureBase64, 'base64'));
  try {
    const out = execFileSync(
      'openssl',
      [
        'dgst',
        '-sha256',
        '-keyform',
        keyform,
        '-verify',
        publicKeyFile,
        '-signature',
        join(work, 'signature'),
        join(work, 'message'),
      ],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    return out.includes('Verified OK');
  } catch {
    return false;
  }
}

/** The signing string of a request the gateway received (spec 5.2). */
function signingStringOf(gatewayUrl: string, request: RecordingGateway['requests'][number]): string {
  const data = (JSON.parse(request.body) as { data: string }).data;
  const h = request.headers;
  return `POST.${gatewayUrl}${request.url}.${String(h['x-timestamp'])}.${String(h['x-nonce'])}.${data}`;
}

function metricValue(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.split(' ').at(-1));
}

async function startPkcs11Sidecar(gateway: RecordingGateway, extra: NodeJS.ProcessEnv = {}): Promise<TestSidecar> {
  const running = await startTestSidecar(pkcs11Env(gateway.url, extra));
  await waitUntilReady(running.sidecar);
  return running;
}

before(async () => {
  if (skip !== undefined) return;
  hsm = newSoftHsm();
  // The sidecar runs in this process for most tests: SoftHSM2 reads its configuration at C_Initialize.
  process.env.SOFTHSM2_CONF = hsm.env.SOFTHSM2_CONF;
  dir = scratchDir('pkcs11-e2e-');
  writeFileSync(join(dir, 'password'), `${TEST_PASSWORD}\n`, { mode: 0o600 });
  pinFile = join(dir, 'pin');
  writeFileSync(pinFile, `${TOKEN.pin}\n`, { mode: 0o600 });
  initToken(hsm, TOKEN.label, TOKEN.pin);
  // The keys the refusals need, each made inside the token by pkcs11-tool.
  pkcs11ToolKeyPair(hsm, TOKEN, { label: 'tool-key', id: 'b0', bits: 2048 });
  pkcs11ToolKeyPair(hsm, TOKEN, { label: 'small', id: 'c0', bits: 1024 });
  await decryptOnlyKeyPair(hsm, TOKEN, { label: 'no-sign', id: 'd0' });
  pkcs11ToolKeyPair(hsm, TOKEN, { label: 'twin', id: 'e1', bits: 2048 });
  pkcs11ToolKeyPair(hsm, TOKEN, { label: 'twin', id: 'e2', bits: 2048 });
});

describe('keys made inside the token', { skip }, () => {
  it('keygen --pkcs11 makes a sensitive, non-extractable, sign-only pair and prints its public key', async () => {
    const env = pkcs11Env('http://127.0.0.1:1');
    const run = await runCommand(keygen, ['--pkcs11', '--bits', '2048'], env);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /generated in token "sidecar-test": RSA 2048 bits, label "payments"/);
    assert.match(run.stdout, /public key fingerprint \(SHA-256 of SPKI DER\): [0-9a-f]{64}/);
    keygenPublicPem = /-----BEGIN PUBLIC KEY-----[\s\S]+?-----END PUBLIC KEY-----\n/.exec(run.stdout)?.[0] ?? '';
    assert.notEqual(keygenPublicPem, '');
    writeFileSync(join(dir, 'payments-public.pem'), keygenPublicPem);
    // What the token itself says of the private key, read by opensc's tool (not by the sidecar's code).
    const objects = execFileSync(
      'pkcs11-tool',
      [
        '--module',
        hsm.module,
        '--token-label',
        TOKEN.label,
        '--login',
        '--pin',
        TOKEN.pin,
        '--list-objects',
        '--type',
        'privkey',
      ],
      { env: { PATH: process.env.PATH, ...hsm.env }, encoding: 'utf8' },
    );
    const entry = objects.split('Private Key Object').find((block) => block.includes('label:      payments')) ?? '';
    assert.match(entry, /Usage:\s+sign\n/, 'sign only: no decrypt, unwrap or derive');
    assert.match(entry, /sensitive/);
    assert.match(entry, /never extractable/);
    const again = await runCommand(keygen, ['--pkcs11'], env);
    assert.equal(again.code, 1, 'an existing key is never replaced');
    assert.match(
      again.stderr,
      /SIDECAR_PKCS11_KEY_LABEL \(pkcs11\.keyLabel\): a private key with this label or ID exists already/,
    );
  });

  it('deposits and withdrawals signed in the token verify with openssl against the exported public key', async () => {
    const gateway = await new RecordingGateway().start();
    const running = await startPkcs11Sidecar(gateway);
    try {
      const start = running.logs.lines().find((line) => line.event === 'start');
      assert.equal(start?.signer, 'pkcs11');
      for (const [path, n] of [
        [DEPOSIT, 1],
        [WITHDRAWAL, 2],
        [DEPOSIT, 3],
      ] as const) {
        const answer = await post(running.sidecar.egressUrl, path, { invoice_no: `INV-${n}`, amount: 100 * n });
        assert.equal(answer.status, 201, answer.body);
      }
      assert.equal(gateway.requests.length, 3);
      for (const request of gateway.requests) {
        const signature = String(request.headers['x-signature']);
        assert.ok(
          opensslVerifies(join(dir, 'payments-public.pem'), signingStringOf(gateway.url, request), signature),
          `openssl verifies the signature of ${request.url}`,
        );
      }
      const metrics = await running.sidecar.metrics.registry.metrics();
      assert.equal(metricValue(metrics, 'signing_sidecar_signatures_total{signer="pkcs11",outcome="success"}'), 3);
      assert.equal(metricValue(metrics, 'signing_sidecar_signer_up{signer="pkcs11"}'), 1);
      // No private key file anywhere in what this test made: the token's key never left it.
      for (const folder of [dir, hsm.dir]) {
        for (const file of readdirSync(folder, { recursive: true, encoding: 'utf8' })) {
          const path = join(folder, file);
          let text = '';
          try {
            text = readFileSync(path, 'latin1');
          } catch {
            continue; // a folder
          }
          assert.doesNotMatch(text, /PRIVATE KEY-----/, `${path} holds no PEM private key`);
        }
      }
    } finally {
      await running.stop();
      await gateway.stop();
    }
  });

  it('check reports the module, token and key and verifies a test signature; sign uses a pkcs11-tool key', async () => {
    const gateway = await new RecordingGateway().start();
    try {
      const checked = await runCommand(check, [], pkcs11Env(gateway.url));
      assert.match(checked.stdout, /✔ PKCS#11 module: .*libsofthsm2\.so/);
      assert.match(checked.stdout, /✔ PKCS#11 token: "sidecar-test", logged in/);
      assert.match(
        checked.stdout,
        /✔ private key: in the token: label "payments", ID [0-9a-f]+, RSA 2048 bits, CKM_SHA256_RSA_PKCS/,
      );
      assert.match(checked.stdout, /✔ test signature: made by the token, verified with its public key/);
      assert.match(checked.stdout, /✔ PIN file permissions: .* has mode 0600 \(owner only\)/);
    } finally {
      await gateway.stop();
    }
    // The public half of pkcs11-tool's key, exported by pkcs11-tool itself.
    const publicDer = join(dir, 'tool-key-public.der');
    execFileSync(
      'pkcs11-tool',
      [
        '--module',
        hsm.module,
        '--token-label',
        TOKEN.label,
        '--read-object',
        '--type',
        'pubkey',
        '--id',
        'b0',
        '-o',
        publicDer,
      ],
      { env: { PATH: process.env.PATH, ...hsm.env }, stdio: 'ignore' },
    );
    const env = {
      ...pkcs11Env('http://127.0.0.1:1'),
      SIDECAR_PKCS11_KEY_LABEL: undefined,
      SIDECAR_PKCS11_KEY_ID: 'b0',
    };
    const signed = await runCommand(
      sign,
      ['--url', `http://127.0.0.1:1${DEPOSIT}`, '--payload', '{"amount":1}', '--json'],
      env,
    );
    assert.equal(signed.code, 0, signed.stderr);
    const out = JSON.parse(signed.stdout) as { signingString: string; headers: { 'X-Signature': string } };
    assert.ok(opensslVerifies(publicDer, out.signingString, out.headers['X-Signature'], 'DER'));
  });
});

describe('the same key in a file and in the token', { skip }, () => {
  let config: Pkcs11SignerConfig;
  let fileKeyPem: string;

  before(() => {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    fileKeyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const der = join(scratchDir('import-'), 'key.der');
    writeFileSync(der, privateKey.export({ type: 'pkcs1', format: 'der' }), { mode: 0o600 });
    importPrivateKey(hsm, TOKEN, { label: 'imported', id: 'f0', derFile: der });
    config = {
      kind: 'pkcs11',
      module: hsm.module,
      token: { label: TOKEN.label },
      key: { label: 'imported', id: undefined },
      pin: new Secret(TOKEN.pin),
      pinFile,
      sessions: 2,
      publicKey: undefined,
    };
  });

  const ignore = () => undefined;
  const events = { onDown: ignore, onReopenFailed: ignore, onUp: ignore };
  const strings = ['POST.https://gw.example/api/v2/transaction/init.1700000000.abcdefghijklmnop.e30=', 'x', 'é€'];

  it('gives byte-identical signatures with CKM_SHA256_RSA_PKCS (PKCS#1 v1.5 is deterministic)', async () => {
    const token = startPkcs11Signer(config, events, loadPkcs11Binding());
    const file = createSigner(createPrivateKey(fileKeyPem));
    try {
      assert.equal(token.mechanism, 'CKM_SHA256_RSA_PKCS');
      for (const text of strings) assert.equal(await token.sign(text), await file.sign(text));
    } finally {
      token.stop();
    }
  });

  it('and with CKM_RSA_PKCS over the SHA-256 DigestInfo, for a token without the combined mechanism', async () => {
    const real = loadPkcs11Binding() as Pkcs11Binding;
    // A module that lists only CKM_RSA_PKCS, as several cloud KMS modules do.
    const rawOnly: Pkcs11Binding = {
      constants: real.constants,
      newLibrary: () => {
        const library = real.newLibrary();
        const list = library.C_GetMechanismList.bind(library);
        library.C_GetMechanismList = (slot) => list(slot).filter((m) => m !== real.constants.CKM_SHA256_RSA_PKCS);
        return library;
      },
    };
    const token = startPkcs11Signer(config, events, rawOnly);
    const file = createSigner(createPrivateKey(fileKeyPem));
    try {
      assert.equal(token.mechanism, 'CKM_RSA_PKCS');
      for (const text of strings) assert.equal(await token.sign(text), await file.sign(text));
    } finally {
      token.stop();
    }
  });

  it('without the binding, SIDECAR_SIGNER=pkcs11 is refused in one line that says so', () => {
    assert.throws(
      () => startPkcs11Signer(config, events, undefined),
      (err: unknown) =>
        err instanceof ConfigError &&
        /^SIDECAR_SIGNER \(signer\): pkcs11 needs the optional package pkcs11js, which is not installed or did not build/.test(
          err.message,
        ) &&
        !err.message.includes('\n'),
    );
  });
});

describe('start-time refusals, each naming its setting', { skip }, () => {
  const otherKey = () => {
    const file = join(dir, 'other-public.pem');
    writeFileSync(
      file,
      createPublicKey(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey).export({
        type: 'spki',
        format: 'pem',
      }),
    );
    return file;
  };
  const wrongPinFile = () => {
    const file = join(dir, 'wrong-pin');
    writeFileSync(file, '999999\n', { mode: 0o600 });
    return file;
  };
  const cases: ReadonlyArray<readonly [string, () => NodeJS.ProcessEnv, RegExp]> = [
    [
      'module not found',
      () => ({ SIDECAR_PKCS11_MODULE: '/nonexistent/libnothing.so' }),
      /SIDECAR_PKCS11_MODULE \(pkcs11\.module\): no file at \/nonexistent\/libnothing\.so/,
    ],
    [
      'not a PKCS#11 library',
      () => ({ SIDECAR_PKCS11_MODULE: process.execPath }),
      /SIDECAR_PKCS11_MODULE \(pkcs11\.module\): .* is not a PKCS#11 library/,
    ],
    [
      'token not found',
      () => ({ SIDECAR_PKCS11_TOKEN_LABEL: 'no-such-token' }),
      /SIDECAR_PKCS11_TOKEN_LABEL \(pkcs11\.tokenLabel\): no token labelled "no-such-token" \(tokens present: "sidecar-test"\)/,
    ],
    [
      'wrong PIN',
      () => ({ SIDECAR_PKCS11_PIN_FILE: wrongPinFile() }),
      /SIDECAR_PKCS11_PIN_FILE \(pkcs11\.pinFile\): the token refused the PIN \(CKR_PIN_INCORRECT\)/,
    ],
    [
      'key not found',
      () => ({ SIDECAR_PKCS11_KEY_LABEL: 'no-such-key' }),
      /SIDECAR_PKCS11_KEY_LABEL \(pkcs11\.keyLabel\): no private key in token "sidecar-test" matches label "no-such-key"/,
    ],
    [
      'more than one key',
      () => ({ SIDECAR_PKCS11_KEY_LABEL: 'twin' }),
      /SIDECAR_PKCS11_KEY_LABEL \(pkcs11\.keyLabel\): more than one private key .* matches label "twin"/,
    ],
    [
      'a key under 2048 bits',
      () => ({ SIDECAR_PKCS11_KEY_LABEL: 'small' }),
      /SIDECAR_PKCS11_KEY_LABEL \(pkcs11\.keyLabel\): key is 1024 bits; at least 2048/,
    ],
    [
      'a key not allowed to sign',
      () => ({ SIDECAR_PKCS11_KEY_LABEL: 'no-sign' }),
      /SIDECAR_PKCS11_KEY_LABEL \(pkcs11\.keyLabel\): the key is not allowed to sign \(CKA_SIGN is false\)/,
    ],
    [
      'another public key than SIDECAR_PUBLIC_KEY_FILE',
      () => ({ SIDECAR_PUBLIC_KEY_FILE: otherKey() }),
      /SIDECAR_PUBLIC_KEY_FILE \(pkcs11\.publicKeyFile\): the token's key \(fingerprint [0-9a-f]{64}\) is not this public key/,
    ],
    [
      'a key file beside the token',
      () => ({ SIDECAR_PRIVATE_KEY_FILE: join(dir, 'password') }),
      /SIDECAR_PRIVATE_KEY_FILE \(privateKeyFile\): is a file signer setting; SIDECAR_SIGNER is pkcs11/,
    ],
    [
      'a PKCS#11 setting with the file signer',
      () => ({ SIDECAR_SIGNER: 'file', SIDECAR_PRIVATE_KEY_FILE: join(dir, 'k.pem') }),
      /SIDECAR_PKCS11_MODULE \(pkcs11\.module\): is a pkcs11 setting; SIDECAR_SIGNER is file/,
    ],
  ];
  for (const [what, extra, line] of cases) {
    it(what, async () => {
      const run = await refusedServe(pkcs11Env('http://127.0.0.1:1', extra()));
      assert.equal(run.code, 2, `exit 2 (configuration error): ${run.stderr}`);
      assert.match(run.stderr, line);
      assert.ok(!run.stderr.includes('999999') && !run.stderr.includes(TOKEN.pin), 'no PIN in the output');
    });
  }
});

describe('while serving', { skip }, () => {
  it('the token taken away under traffic: 503 sidecar.signer.unavailable, nothing sent, not ready; back: it recovers', async () => {
    const gateway = await new RecordingGateway().start();
    const running = await startPkcs11Sidecar(gateway);
    const { sidecar } = running;
    const answers: Array<{ status: number; body: string }> = [];
    let flowing = true;
    // Requests flow one after another for the whole test, as a caller's would.
    const flow = (async () => {
      for (let n = 0; flowing; n++) {
        answers.push(await post(sidecar.egressUrl, DEPOSIT, { invoice_no: `FLOW-${n}`, amount: 1 }));
        await sleep(20);
      }
    })();
    try {
      await waitFor('traffic', () => answers.some((a) => a.status === 201));
      const restore = removeTokens(hsm);
      await waitFor('a refusal', () => answers.some((a) => a.status === 503), 10_000);
      const refused = answers.find((a) => a.status === 503);
      assert.deepEqual(JSON.parse(refused?.body ?? '{}'), {
        code: 'sidecar.signer.unavailable',
        message: 'the signing key (HSM or KMS) is unavailable; nothing was sent: send it again shortly',
        retryable: true,
      });
      assert.equal(sidecar.isReady(), false);
      const readyz = await fetch(`${sidecar.adminUrl}/readyz`);
      assert.equal(readyz.status, 503, 'readiness false while no signature can be made');
      const down = await sidecar.metrics.registry.metrics();
      assert.equal(metricValue(down, 'signing_sidecar_signer_up{signer="pkcs11"}'), 0);
      assert.ok(metricValue(down, 'signing_sidecar_signatures_total{signer="pkcs11",outcome="failure"}') >= 1);
      await sleep(500);
      restore();
      await waitFor('ready again', () => sidecar.isReady(), 20_000);
      const after = answers.length;
      await waitFor('a success after the return', () => answers.slice(after).some((a) => a.status === 201), 10_000);
      flowing = false;
      await flow;
      const ok = answers.filter((a) => a.status === 201).length;
      const unavailable = answers.filter((a) => a.status === 503).length;
      assert.equal(ok + unavailable, answers.length, 'every answer is a success or signer.unavailable');
      assert.equal(gateway.requests.length, ok, 'nothing reached the gateway for a refused request');
      const logs = running.logs.lines().map((line) => line.event);
      assert.ok(logs.includes('signer.down') && logs.includes('signer.up'));
    } finally {
      flowing = false;
      await flow;
      await running.stop();
      await gateway.stop();
    }
  });

  it('64 requests at once: the event loop stays responsive, a health probe answers throughout', async () => {
    const gateway = await new RecordingGateway().start();
    // A real `serve` process of its own, so that what is measured is the sidecar's event loop, not this test's.
    const sidecar = await spawnSidecar(pkcs11Env(gateway.url), 30_000);
    /** prom-client's monitorEventLoopDelay maximum since the previous scrape (each scrape resets it). */
    const loopDelayMaxMs = async () => {
      const text = await (await fetch(`${sidecar.adminUrl}/metrics`)).text();
      return metricValue(text, 'signing_sidecar_nodejs_eventloop_lag_max_seconds') * 1000;
    };
    const probes: number[] = [];
    let probing = true;
    let probe: Promise<void> = Promise.resolve();
    try {
      await waitFor('a token', async () => (await fetch(`${sidecar.adminUrl}/healthz/token`)).status === 200, 20_000);
      // Warm up (JIT, connections), then start the measured window.
      await Promise.all(Array.from({ length: 8 }, (_, n) => post(sidecar.proxyUrl, DEPOSIT, { invoice_no: `W-${n}` })));
      await loopDelayMaxMs();
      probe = (async () => {
        while (probing) {
          const started = performance.now();
          const res = await fetch(`${sidecar.adminUrl}/livez`);
          await res.arrayBuffer();
          assert.equal(res.status, 200);
          probes.push(performance.now() - started);
          await sleep(5);
        }
      })();
      const rounds: number[] = [];
      for (let round = 0; round < 3; round++) {
        const answers = await Promise.all(
          Array.from({ length: 64 }, (_, n) => post(sidecar.proxyUrl, DEPOSIT, { invoice_no: `C-${round}-${n}` })),
        );
        rounds.push(await loopDelayMaxMs());
        assert.deepEqual(
          answers.map((a) => a.status),
          Array<number>(64).fill(201),
        );
      }
      probing = false;
      await probe;
      const sorted = [...probes].sort((a, b) => a - b);
      const report = `sidecar event loop delay max per round ${rounds.map((ms) => ms.toFixed(1)).join(', ')} ms; ${probes.length} probes from the test, median ${sorted[Math.floor(sorted.length / 2)]?.toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms`;
      console.log(`# ${report}`);
      // Measured inside the sidecar (its own monitorEventLoopDelay), whatever the shared machine's scheduler does to
      // this test's probes (reported; each must have been answered), the best of three rounds. The bound is
      // generous: on the project's shared 2-core machines the file signer's sidecar itself measures 50 to 190 ms
      // for the same burst (parsing, wrapping and sending 64 requests at once). The signer-only test below holds the
      // 50 ms line.
      assert.ok(Math.min(...rounds) < 250, report);
      assert.ok(probes.length > 0, 'the probe answered during the burst');
    } finally {
      probing = false;
      await probe.catch(() => undefined);
      await sidecar.kill();
      await gateway.stop();
    }
  });

  it('64 signatures at once in the token: the event loop is never held 50 ms', async () => {
    const ignore = () => undefined;
    const signer = startPkcs11Signer(
      {
        kind: 'pkcs11',
        module: hsm.module,
        token: { label: TOKEN.label },
        key: { label: 'payments', id: undefined },
        pin: new Secret(TOKEN.pin),
        pinFile,
        sessions: 4,
        publicKey: undefined,
      },
      { onDown: ignore, onReopenFailed: ignore, onUp: ignore },
      loadPkcs11Binding(),
    );
    const rounds: string[] = [];
    let best = Number.POSITIVE_INFINITY;
    try {
      await signer.sign('warm-up');
      // The best of three rounds: a signer that holds the event loop does so in every round, whereas the shared
      // machine's scheduler hiccups (other processes, this process's garbage collection) do not repeat.
      for (let round = 0; round < 3 && best >= 50; round++) {
        const delay = monitorEventLoopDelay({ resolution: 5 });
        delay.enable();
        const started = performance.now();
        const signatures = await Promise.all(Array.from({ length: 64 }, (_, n) => signer.sign(`payment ${n}`)));
        const elapsedMs = performance.now() - started;
        delay.disable();
        assert.equal(new Set(signatures).size, 64);
        best = Math.min(best, delay.max / 1e6);
        rounds.push(
          `64 signatures in ${elapsedMs.toFixed(0)} ms, event loop delay max ${(delay.max / 1e6).toFixed(1)} ms`,
        );
      }
      console.log(`# ${rounds.join('; ')}`);
      assert.ok(best < 50, rounds.join('; '));
    } finally {
      signer.stop();
    }
  });

  it('the PIN file rotated: the next session opens with the new PIN', async () => {
    const gateway = await new RecordingGateway().start();
    const running = await startPkcs11Sidecar(gateway);
    const { sidecar } = running;
    const newPin = '135791';
    try {
      assert.equal((await post(sidecar.egressUrl, DEPOSIT, { invoice_no: 'PIN-1' })).status, 201);
      // The token officer changes the PIN, then the Secret holding the PIN file is updated.
      changePin(hsm, TOKEN, newPin);
      writeFileSync(`${pinFile}.new`, `${newPin}\n`, { mode: 0o600 });
      renameSync(`${pinFile}.new`, pinFile);
      await waitFor('the PIN file reloaded', async () => {
        const text = await sidecar.metrics.registry.metrics();
        return metricValue(text, 'signing_sidecar_config_reloads_total{setting="pkcs11_pin",outcome="success"}') === 1;
      });
      // The sessions open now keep working; the next ones must log in with the new PIN: take the token away so
      // that every session is opened again.
      const restore = removeTokens(hsm);
      assert.equal((await post(sidecar.egressUrl, DEPOSIT, { invoice_no: 'PIN-2' })).status, 503);
      restore();
      await waitFor('ready again with the new PIN', () => sidecar.isReady(), 20_000);
      assert.equal((await post(sidecar.egressUrl, DEPOSIT, { invoice_no: 'PIN-3' })).status, 201);
      assert.ok(!running.logs.text.includes(newPin) && !running.logs.text.includes(TOKEN.pin), 'no PIN in the logs');
    } finally {
      await running.stop();
      await gateway.stop();
      changePin(hsm, { ...TOKEN, pin: newPin }, TOKEN.pin);
      writeFileSync(pinFile, `${TOKEN.pin}\n`, { mode: 0o600 });
    }
  });
});

/** `serve` run in this process; one that starts after all is stopped after 5 s (and fails the exit-code check). */
async function refusedServe(env: NodeJS.ProcessEnv): Promise<{ code: number; stderr: string }> {
  const stderr = new PassThrough();
  const chunks: Buffer[] = [];
  stderr.on('data', (c: Buffer) => chunks.push(c));
  const code = await serve([], {
    stdout: new PassThrough().resume(),
    stderr,
    env,
    stopSignal: sleep(5_000).then(() => 'SIGTERM' as const),
  });
  return { code, stderr: Buffer.concat(chunks).toString('utf8') };
}

async function waitFor(what: string, condition: () => boolean | Promise<boolean>, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

after(() => {
  delete process.env.SOFTHSM2_CONF;
});
