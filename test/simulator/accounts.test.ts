// Account loading: the checks the gateway makes at key upload, and the accounts file format.
import assert from 'node:assert/strict';
import { generateKeyPair } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { loadAccounts } from '../../packages/simulator/src/accounts.js';
import { AccountConfigError, readAccountsFile, startSimulator } from '@signing-sidecar/simulator';
import { makeKeys } from './support.js';
import type { TestKeys } from './support.js';
import type { SimulatorAccountInput } from '@signing-sidecar/simulator';

describe('accounts', () => {
  let keys: TestKeys;
  let smallPem: string;
  let ecPem: string;
  let dir: string;
  before(async () => {
    const gen = promisify(generateKeyPair);
    const [k, small, ec, d] = await Promise.all([
      makeKeys(),
      gen('rsa', { modulusLength: 1024 }),
      gen('ec', { namedCurve: 'P-256' }),
      mkdtemp(join(tmpdir(), 'sim-accounts-')),
    ]);
    keys = k;
    smallPem = small.publicKey.export({ type: 'spki', format: 'pem' }).toString();
    ecPem = ec.publicKey.export({ type: 'spki', format: 'pem' }).toString();
    dir = d;
  });
  after(() => rm(dir, { recursive: true, force: true }));

  // Deliberately loose input: these tests feed the loader what a hand-written config file could contain.
  const account = (over: Record<string, unknown>): SimulatorAccountInput => ({
    username: 'v@example.com',
    password: 'pw',
    publicKeyPem: keys.publicKeyPem,
    ...over,
  });

  it('loads a valid account with loopback allowlisted by default', () => {
    const loaded = loadAccounts([account({})]).get('v@example.com');
    assert.equal(loaded?.keyBits, 2048);
    assert.deepEqual(loaded?.allowIps, ['127.0.0.1', '::1']);
    assert.equal(loaded?.passwordMatches('pw'), true);
    assert.equal(loaded?.passwordMatches('pw '), false);
  });

  it('rejects at load what the gateway rejects at upload, naming the account', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ publicKeyPem: smallPem }, /1024 bits; at least 2048/],
      [{ publicKeyPem: ecPem }, /not RSA/],
      [{ publicKeyPem: '-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----' }, /private key/],
      [{ publicKeyPem: 'not a pem' }, /not a valid PEM/],
      [{ password: '' }, /password is required/],
      [{ allowIps: ['10.0.0.1', 'nope'] }, /allowIps/],
      [{ webhookUrl: 'ftp://x' }, /webhookUrl/],
    ];
    for (const [over, message] of cases) {
      assert.throws(
        () => loadAccounts([account(over)]),
        (err: Error) => {
          assert.ok(err instanceof AccountConfigError);
          assert.match(err.message, /v@example\.com/);
          assert.match(err.message, message);
          return true;
        },
      );
    }
    assert.throws(() => loadAccounts([account({}), account({})]), /defined twice/);
    assert.throws(() => loadAccounts([]), /at least one/);
  });

  it('startSimulator refuses a small key before listening', async () => {
    await assert.rejects(
      startSimulator({ accounts: [{ username: 'a', password: 'b', publicKeyPem: smallPem }] }),
      AccountConfigError,
    );
  });

  it('reads a YAML accounts file with key and password files relative to it', async () => {
    await writeFile(join(dir, 'vendor.pub.pem'), keys.publicKeyPem);
    await writeFile(join(dir, 'password.txt'), 's3cret\n');
    await writeFile(
      join(dir, 'accounts.yaml'),
      [
        'accounts:',
        '  - username: v@example.com',
        '    password_file: password.txt',
        '    public_key_file: vendor.pub.pem',
        '    allow_ips: [127.0.0.1, 10.0.0.0/8]',
        '    webhook_url: http://127.0.0.1:9/hook',
        '    signed_postbacks: true',
      ].join('\n'),
    );
    const [input] = await readAccountsFile(join(dir, 'accounts.yaml'));
    assert.equal(input?.password, 's3cret');
    assert.equal(input?.publicKeyPem, keys.publicKeyPem);
    assert.deepEqual(input?.allowIps, ['127.0.0.1', '10.0.0.0/8']);
    assert.equal(input?.signedPostbacks, true);
    assert.ok(loadAccounts(input === undefined ? [] : [input]).get('v@example.com'));
  });

  it('reports a broken accounts file clearly', async () => {
    await writeFile(join(dir, 'bad.json'), JSON.stringify({ accounts: [{ username: 'x', signed_postbacks: 'yes' }] }));
    await assert.rejects(readAccountsFile(join(dir, 'bad.json')), /signed_postbacks must be true or false/);
    await writeFile(join(dir, 'none.json'), '{"users": []}');
    await assert.rejects(readAccountsFile(join(dir, 'none.json')), /top-level "accounts" list/);
  });
});
