import assert from 'node:assert/strict';
import { constants, generateKeyPairSync, sign as rsaSign } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { sign } from '../../src/cli/sign.js';
import { createVerify } from '../../src/cli/verify.js';
import { vectorPrivateKeyPem, vectorPublicKeyPem, vectors, type SignatureVector } from '../support/vectors.js';
import { runCommand, stdinOf, tempDir } from './run-command.js';

const v0 = vectors[0]!;

/** A raw HTTP capture as a vendor's webhook log or `nc -l` shows it. */
function rawCapture(o: {
  target: string;
  host: string;
  ts: string;
  nonce: string;
  signature: string;
  body: string;
}): string {
  return [
    `POST ${o.target} HTTP/1.1`,
    `Host: ${o.host}`,
    'Content-Type: application/json',
    `X-Timestamp: ${o.ts}`,
    `X-Nonce: ${o.nonce}`,
    `X-Signature: ${o.signature}`,
    '',
    o.body,
  ].join('\r\n');
}

function vectorCapture(
  v: SignatureVector,
  overrides: Partial<{ body: string; signature: string; target: string; host: string }> = {},
): string {
  const url = new URL(v.full_url);
  return rawCapture({
    target: overrides.target ?? `${url.pathname}${url.search}`,
    host: overrides.host ?? url.host,
    ts: v.timestamp,
    nonce: v.nonce,
    signature: overrides.signature ?? v.signature,
    body: overrides.body ?? JSON.stringify({ data: v.data }),
  });
}

/** Signs an arbitrary (mis-built) signing string with the vector key, as a buggy vendor signer would. */
function signRaw(text: string): string {
  return rsaSign('sha256', Buffer.from(text), {
    key: vectorPrivateKeyPem,
    padding: constants.RSA_PKCS1_PADDING,
  }).toString('base64');
}

describe('verify', () => {
  let pubFile: string;
  let otherPubFile: string;
  let dir: string;
  let cleanup: () => Promise<void>;
  before(async () => {
    ({ dir, cleanup } = await tempDir());
    pubFile = join(dir, 'vector-pub.pem');
    await writeFile(pubFile, vectorPublicKeyPem);
    otherPubFile = join(dir, 'other-pub.pem');
    const other = generateKeyPairSync('rsa', { modulusLength: 2048 });
    await writeFile(otherPubFile, other.publicKey.export({ type: 'spki', format: 'pem' }));
  });
  after(() => cleanup());

  const verifyWith = (capture: string, argv: string[]) => runCommand(createVerify(stdinOf(capture)), argv);

  for (const v of vectors.filter((x) => x.name !== 'empty-query-dropped')) {
    it(`${v.name}: a raw HTTP capture on stdin verifies (exit 0) and the rebuilt signing string is the vector's`, async () => {
      const scheme = new URL(v.full_url).protocol.slice(0, -1);
      const run = await verifyWith(vectorCapture(v), [
        '--public-key',
        pubFile,
        '--scheme',
        scheme,
        '--now',
        v.timestamp,
      ]);
      assert.equal(run.code, 0, run.stdout + run.stderr);
      assert.ok(run.stdout.split('\n').includes(v.signing_string), run.stdout);
      assert.match(run.stdout, /✔ X-Timestamp is within the window/);
      assert.match(run.stdout, /result: signature VERIFIES/);
    });
  }

  it('an empty "?" on the request line is not signed (empty-query vector)', async () => {
    const v = vectors.find((x) => x.name === 'empty-query-dropped')!;
    const run = await verifyWith(vectorCapture(v, { target: '/api/v2/transaction/init?' }), [
      '--public-key',
      pubFile,
      '--now',
      v.timestamp,
    ]);
    assert.equal(run.code, 0, run.stdout);
  });

  it('reads the JSON capture form from --request FILE, with --url', async () => {
    const file = join(dir, 'capture.json');
    const headers = { 'X-Timestamp': v0.timestamp, 'x-nonce': v0.nonce, 'X-SIGNATURE': v0.signature };
    await writeFile(file, JSON.stringify({ method: 'POST', headers, body: { data: v0.data } }));
    const run = await runCommand(createVerify(stdinOf('')), [
      '--public-key',
      pubFile,
      '--request',
      file,
      '--url',
      v0.full_url,
      '--now',
      v0.timestamp,
    ]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
  });

  it('an old capture still verifies, with a warning that the gateway would now call it expired', async () => {
    const run = await verifyWith(vectorCapture(v0), ['--public-key', pubFile]);
    assert.equal(run.code, 0);
    assert.match(run.stdout, /! X-Timestamp is \d+ s behind now: the gateway answers signature\.timestamp\.expired/);
  });

  it('altered data fails (exit 1) and is blamed on the key or altered parts, with the rebuilt signing string', async () => {
    const payload = v0.payload.replace('100.50', '900.50');
    const data = Buffer.from(payload).toString('base64');
    const run = await verifyWith(vectorCapture(v0, { body: JSON.stringify({ data }) }), [
      '--public-key',
      pubFile,
      '--now',
      v0.timestamp,
    ]);
    assert.equal(run.code, 1);
    assert.ok(run.stdout.includes(`${v0.timestamp}.${v0.nonce}.${data}`), 'rebuilt signing string printed');
    assert.match(
      run.stdout,
      /✘ signature does not match this public key: wrong key .* or the URL, timestamp, nonce or data were altered/,
    );
    assert.match(run.stdout, /result: signature does NOT verify/);
  });

  it('data that lost its base64 padding is reported as such', async () => {
    const run = await verifyWith(vectorCapture(v0, { body: JSON.stringify({ data: v0.data.replace(/=+$/, '') }) }), [
      '--public-key',
      pubFile,
      '--now',
      v0.timestamp,
    ]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /✘ body data lacks "=" padding/);
  });

  it('a body that is not the {"data"} envelope is reported', async () => {
    const run = await verifyWith(vectorCapture(v0, { body: v0.payload }), [
      '--public-key',
      pubFile,
      '--now',
      v0.timestamp,
    ]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /body has no string field "data"/);
  });

  it('the wrong public key fails with the fingerprint to compare', async () => {
    const run = await verifyWith(vectorCapture(v0), ['--public-key', otherPubFile, '--now', v0.timestamp]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /public key: RSA 2048 bits, fingerprint [0-9a-f]{64}/);
    assert.match(run.stdout, /signature does not match this public key/);
  });

  const urlMistakes: { name: string; signedUrl: string; argv: string[]; rule: RegExp }[] = [
    {
      name: 'default port signed',
      signedUrl: 'https://gateway.example.com:443/api/v2/transaction/init',
      argv: [],
      rule: /default port written out/,
    },
    {
      name: 'uppercase host signed',
      signedUrl: 'https://Gateway.Example.com/api/v2/transaction/init',
      argv: ['--url', 'https://Gateway.Example.com/api/v2/transaction/init'],
      rule: /host or port not canonical/,
    },
    {
      name: 'other scheme',
      signedUrl: 'https://gateway.example.com/api/v2/transaction/init',
      argv: ['--scheme', 'http'],
      rule: /scheme https signed but http posted/,
    },
    {
      name: 'trailing slash dropped',
      signedUrl: 'https://gateway.example.com/api/v2/transaction/init',
      argv: ['--url', 'https://gateway.example.com/api/v2/transaction/init/'],
      rule: /trailing "\/" differs/,
    },
    {
      name: 'query dropped',
      signedUrl: 'https://gateway.example.com/api/v2/transaction/init',
      argv: ['--url', 'https://gateway.example.com/api/v2/transaction/init?a=1'],
      rule: /query left out/,
    },
    { name: 'path only', signedUrl: '/api/v2/transaction/init', argv: [], rule: /origin left out/ },
  ];
  for (const m of urlMistakes) {
    it(`names the broken URL rule when the signer erred: ${m.name}`, async () => {
      const signature = signRaw(`POST.${m.signedUrl}.${v0.timestamp}.${v0.nonce}.${v0.data}`);
      const run = await verifyWith(vectorCapture(v0, { signature }), [
        '--public-key',
        pubFile,
        '--now',
        v0.timestamp,
        ...m.argv,
      ]);
      assert.equal(run.code, 1, run.stdout);
      assert.match(run.stdout, m.rule);
      assert.ok(run.stdout.includes(`the signer signed: POST.${m.signedUrl}.`), run.stdout);
    });
  }

  it('names a signer that signed the decoded payload instead of data', async () => {
    const signature = signRaw(`POST.${v0.full_url}.${v0.timestamp}.${v0.nonce}.${v0.payload}`);
    const run = await verifyWith(vectorCapture(v0, { signature }), ['--public-key', pubFile, '--now', v0.timestamp]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /decoded payload signed instead of the base64 data string/);
  });

  it('a signature that verifies over a malformed request is still a rejection: base64url X-Signature, bad nonce', async () => {
    const target = '/api/v2/transaction/init';
    const badNonce = 'short+nonce';
    const signature = signRaw(`POST.https://gateway.example.com${target}.${v0.timestamp}.${badNonce}.${v0.data}`);
    const urlSafe = Buffer.from(signature, 'base64').toString('base64url');
    for (const [nonce, sig, complaint] of [
      [v0.nonce, Buffer.from(v0.signature, 'base64').toString('base64url'), /✘ X-Signature uses "-" or "_"/],
      [badNonce, signature, /✘ X-Nonce is 11 characters/],
      [badNonce, urlSafe, /✘ X-Nonce/],
    ] as const) {
      const capture = rawCapture({
        target,
        host: 'gateway.example.com',
        ts: v0.timestamp,
        nonce,
        signature: sig,
        body: JSON.stringify({ data: v0.data }),
      });
      const run = await verifyWith(capture, ['--public-key', pubFile, '--now', v0.timestamp]);
      assert.match(run.stdout, complaint);
      assert.match(run.stdout, /✔ signature verifies/);
      assert.match(run.stdout, /result: the signature math verifies, but the gateway would REJECT this request/);
      assert.equal(run.code, 1);
    }
  });

  it('reports a future timestamp and a malformed nonce', async () => {
    const capture = rawCapture({
      target: '/api/v2/transaction/init',
      host: 'gateway.example.com',
      ts: v0.timestamp,
      nonce: 'not+a/nonce=',
      signature: v0.signature,
      body: JSON.stringify({ data: v0.data }),
    });
    const run = await verifyWith(capture, ['--public-key', pubFile, '--now', String(Number(v0.timestamp) - 30)]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /✘ X-Nonce is 12 characters/);
    assert.match(run.stdout, /30 s ahead of now: the gateway answers signature\.timestamp\.future/);
  });

  it('an unsigned capture (no X-Signature) fails and says signing may not be enabled', async () => {
    const run = await verifyWith(`POST /hook HTTP/1.1\nHost: vendor.example.com\n\n{"data":"${v0.data}"}`, [
      '--public-key',
      pubFile,
    ]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /missing header\(s\): x-timestamp, x-nonce, x-signature/);
  });

  it('takes the output of `sign --json` as a capture: the key-pair round trip of First day step 4', async () => {
    const keyFile = join(dir, 'vector-key.pem');
    await writeFile(keyFile, vectorPrivateKeyPem, { mode: 0o600 });
    const payload = '{"amount":"1.00","currency":"USD","user_id":"u-1","invoice_no":"KEY-CHECK-1"}';
    const url = 'https://staging.gateway.example/api/v2/transaction/init';
    const signed = await runCommand(sign, ['--json', '--key', keyFile, '--url', url, '--payload', payload]);
    assert.equal(signed.code, 0, signed.stderr);
    const good = await verifyWith(signed.stdout, ['--public-key', pubFile]);
    assert.equal(good.code, 0, good.stdout);
    assert.match(good.stdout, /^result: signature VERIFIES$/m);
    const wrongKey = await verifyWith(signed.stdout, ['--public-key', otherPubFile]);
    assert.equal(wrongKey.code, 1);
    assert.match(wrongKey.stdout, /does not match this public key/);
  });

  it('an EC public key is named as such (exit 1)', async () => {
    const ecPub = join(dir, 'ec-pub.pem');
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey;
    await writeFile(ecPub, ec.export({ type: 'spki', format: 'pem' }));
    const run = await verifyWith(vectorCapture(v0), ['--public-key', ecPub]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /ec-pub\.pem: an EC key: RSA required/);
  });

  it('usage and input errors: exit 2 for bad flags, exit 1 for unreadable input', async () => {
    assert.equal((await verifyWith('', [])).code, 2);
    assert.equal((await verifyWith('', ['--public-key', pubFile, '--scheme', 'ftp'])).code, 2);
    assert.equal((await verifyWith('', ['--public-key', pubFile, '--wat'])).code, 2);
    const noHost = await verifyWith(`POST /x HTTP/1.1\nX-Nonce: a\n\n{}`, ['--public-key', pubFile]);
    assert.equal(noHost.code, 1);
    assert.match(noHost.stderr, /no Host header; pass the full URL with --url/);
    const privateGiven = await verifyWith(vectorCapture(v0), ['--public-key', join(dir, 'nope.pem')]);
    assert.equal(privateGiven.code, 1);
    assert.match(privateGiven.stderr, /cannot read .*nope\.pem: ENOENT/);
    assert.equal((await verifyWith('', ['--help'])).code, 0);
  });
});
