import assert from 'node:assert/strict';
import { createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { sign } from '../../src/cli/sign.js';
import { NONCE_PATTERN } from '../../src/signing/nonce.js';
import { vectorPrivateKeyPem, vectorPublicKeyPem, vectors } from '../support/vectors.js';
import { runCommand, tempDir } from './run-command.js';

interface SignJson {
  method: string;
  url: string;
  signingString: string;
  headers: Record<string, string>;
  body: string;
}

describe('sign', () => {
  let dir: string;
  let keyFile: string;
  let smallKeyFile: string;
  let cleanup: () => Promise<void>;
  before(async () => {
    ({ dir, cleanup } = await tempDir());
    keyFile = join(dir, 'vector-key.pem');
    await writeFile(keyFile, vectorPrivateKeyPem, { mode: 0o600 });
    smallKeyFile = join(dir, 'small.pem');
    const small = generateKeyPairSync('rsa', { modulusLength: 1024 });
    await writeFile(smallKeyFile, small.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  });
  after(() => cleanup());

  for (const v of vectors) {
    it(`${v.name}: reproduces the openssl signing string and signature byte for byte`, async () => {
      // The vectors give base address + target; a vendor passes the URL as they post it, uncanonicalised.
      const url = `${v.base_url}${v.request_target}`;
      const run = await runCommand(sign, [
        '--url',
        url,
        '--data',
        v.data,
        '--timestamp',
        v.timestamp,
        '--nonce',
        v.nonce,
        '--key',
        keyFile,
        '--method',
        v.method,
      ]);
      assert.equal(run.code, 0, run.stderr);
      const lines = run.stdout.split('\n');
      assert.equal(lines[1], v.signing_string);
      assert.ok(lines.includes(`X-Signature: ${v.signature}`));
      assert.ok(lines.includes(`X-Timestamp: ${v.timestamp}`) && lines.includes(`X-Nonce: ${v.nonce}`));
      assert.ok(lines.includes(JSON.stringify({ data: v.data })));
    });
  }

  it('--json with --payload: base64-encodes the payload, and the signature verifies with the public key', async () => {
    const v = vectors[0]!;
    const run = await runCommand(sign, [
      '--json',
      '--url',
      v.full_url,
      '--payload',
      v.payload,
      '--timestamp',
      v.timestamp,
      '--nonce',
      v.nonce,
      '--key',
      keyFile,
    ]);
    assert.equal(run.code, 0, run.stderr);
    const out = JSON.parse(run.stdout) as SignJson;
    assert.equal(out.signingString, v.signing_string);
    assert.equal(out.headers['X-Signature'], v.signature);
    assert.equal(out.body, `{"data":"${v.data}"}`);
  });

  it('defaults to now and a fresh spec-shaped nonce, and takes the key from SIDECAR_PRIVATE_KEY_FILE', async () => {
    const before = Math.floor(Date.now() / 1000);
    const args = ['--json', '--url', 'https://gateway.example.com/api/v2/transaction/init', '--data', vectors[0]!.data];
    const a = JSON.parse((await runCommand(sign, args, { SIDECAR_PRIVATE_KEY_FILE: keyFile })).stdout) as SignJson;
    const b = JSON.parse((await runCommand(sign, args, { SIDECAR_PRIVATE_KEY_FILE: keyFile })).stdout) as SignJson;
    const ts = Number(a.headers['X-Timestamp']);
    assert.ok(ts >= before && ts <= before + 2);
    assert.match(a.headers['X-Nonce']!, NONCE_PATTERN);
    assert.notEqual(a.headers['X-Nonce'], b.headers['X-Nonce']);
    const ok = verify(
      'sha256',
      Buffer.from(a.signingString),
      createPublicKey(vectorPublicKeyPem),
      Buffer.from(a.headers['X-Signature']!, 'base64'),
    );
    assert.equal(ok, true);
  });

  it('tells the vendor when the URL was canonicalised (uppercase host, default port, empty query)', async () => {
    const run = await runCommand(sign, [
      '--url',
      'HTTPS://Gateway.Example.COM:443/api/v2/transaction/init?',
      '--data',
      vectors[0]!.data,
      '--key',
      keyFile,
    ]);
    assert.equal(run.code, 0);
    assert.match(run.stderr, /canonicalised .* -> https:\/\/gateway\.example\.com\/api\/v2\/transaction\/init\n/);
  });

  it('refuses bad inputs with exit 2 and says which', async () => {
    const base = ['--url', 'https://gateway.example.com/x', '--key', keyFile];
    const cases: [string[], RegExp][] = [
      [[...base, '--data', 'eyJhIjoxfQ'], /--data data lacks "=" padding/],
      [[...base, '--data', 'eyJh-_'], /base64url/],
      [[...base, '--data', 'eyJhIjoxfQ==', '--nonce', 'short'], /--nonce is 5 characters/],
      [[...base, '--data', 'eyJhIjoxfQ==', '--nonce', 'a+b/c=ddddddddddddddd'], /outside \[A-Za-z0-9_-\]/],
      [[...base, '--data', 'eyJhIjoxfQ==', '--timestamp', '1763700000123'], /milliseconds/],
      [[...base, '--data', 'eyJhIjoxfQ==', '--timestamp', '2025-11-21T00:00:00Z'], /not Unix seconds/],
      [['--url', 'ftp://x/y', '--key', keyFile, '--data', 'eyJhIjoxfQ=='], /scheme ftp is not http or https/],
      [['--url', '/api/v2/transaction/init', '--key', keyFile, '--data', 'eyJhIjoxfQ=='], /not an absolute http/],
      [['--url', 'https://x/y', '--data', 'eyJhIjoxfQ=='], /--key is required/],
      [[...base], /exactly one of --data or --payload/],
      [[...base, '--data', 'eyJhIjoxfQ==', '--bogus'], /Unknown option/],
    ];
    for (const [argv, message] of cases) {
      const run = await runCommand(sign, argv);
      assert.equal(run.code, 2, argv.join(' '));
      assert.match(run.stderr, message);
      assert.match(run.stderr, /usage: signing-sidecar sign/);
    }
  });

  it('--payload must be what the sidecar would sign: JSON, an object, no byte order mark (exit 2)', async () => {
    const base = ['--url', 'https://gateway.example.com/x', '--key', keyFile];
    const cases: [string, RegExp][] = [
      ['{"amount":"100.50"', /--payload is not valid JSON: .*\(sidecar\.body\.invalid_json\)/],
      ['amount=100.50', /--payload is not valid JSON/],
      ['[{"amount":"100.50"}]', /--payload is JSON but not an object \(sidecar\.body\.not_object\)/],
      ['\uFEFF{"amount":"100.50"}', /--payload starts with a byte order mark/],
    ];
    for (const [payload, message] of cases) {
      const run = await runCommand(sign, [...base, '--payload', payload]);
      assert.equal(run.code, 2, payload);
      assert.match(run.stderr, message);
      assert.equal(run.stdout, '', 'nothing signed');
    }
  });

  it('--method must be uppercase: a lowercase method is refused (exit 2), not fixed silently', async () => {
    const base = ['--url', 'https://gateway.example.com/x', '--key', keyFile, '--data', 'eyJhIjoxfQ=='];
    const lower = await runCommand(sign, [...base, '--method', 'post']);
    assert.equal(lower.code, 2);
    assert.match(lower.stderr, /--method "post" must be uppercase \("POST"\)/);
    assert.equal(lower.stdout, '');
    const upper = await runCommand(sign, [...base, '--method', 'PUT', '--json']);
    assert.equal(upper.code, 0, upper.stderr);
    assert.match((JSON.parse(upper.stdout) as SignJson).signingString, /^PUT\.https:/);
  });

  it('names a key that is not RSA (EC, Ed25519) as such, in SEC1 and PKCS#8 form (exit 1)', async () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    const ed = generateKeyPairSync('ed25519').privateKey;
    const keys: [string, string, RegExp][] = [
      ['ec-sec1.pem', ec.export({ type: 'sec1', format: 'pem' }).toString(), /an EC key: RSA required/],
      ['ec-pkcs8.pem', ec.export({ type: 'pkcs8', format: 'pem' }).toString(), /an EC key: RSA required/],
      ['ed25519.pem', ed.export({ type: 'pkcs8', format: 'pem' }).toString(), /an Ed25519 key: RSA required/],
    ];
    for (const [name, pem, message] of keys) {
      await writeFile(join(dir, name), pem, { mode: 0o600 });
      const run = await runCommand(sign, ['--url', 'https://x/y', '--data', 'eyJhIjoxfQ==', '--key', join(dir, name)]);
      assert.equal(run.code, 1, name);
      assert.match(run.stderr, message, name);
      assert.doesNotMatch(run.stderr, /not a (readable )?PEM private key/, name);
      assert.ok(!run.stderr.includes(pem.split('\n')[1]!), 'key material printed');
    }
  });

  it('refuses a 1024-bit key (exit 1) without printing key material', async () => {
    const run = await runCommand(sign, [
      '--url',
      'https://gateway.example.com/x',
      '--data',
      'eyJhIjoxfQ==',
      '--key',
      smallKeyFile,
    ]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /1024 bits; at least 2048/);
    assert.ok(!`${run.stdout}${run.stderr}`.includes('BEGIN'));
  });

  it('--help exits 0', async () => {
    const run = await runCommand(sign, ['--help']);
    assert.equal(run.code, 0);
    assert.match(run.stdout, /compare byte for byte/);
  });
});
