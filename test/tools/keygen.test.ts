import assert from 'node:assert/strict';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { readFile, stat, writeFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { keygen } from '../../src/cli/keygen.js';
import { parsePrivateKey } from '../../src/config/private-key.js';
import { publicKeyFingerprint } from '../../src/signing/keys.js';
import { runCommand, tempDir } from './run-command.js';

describe('keygen', () => {
  let dir: string;
  let cleanup: () => Promise<void>;
  before(async () => ({ dir, cleanup } = await tempDir()));
  after(() => cleanup());

  it('writes a 0600 PKCS#8 private key the sidecar accepts and the matching SPKI public key, and prints the fingerprint', async () => {
    const run = await runCommand(keygen, ['--bits', '2048', '--out', dir]);
    assert.equal(run.code, 0, run.stderr);
    const privatePem = await readFile(join(dir, 'private-key.pem'), 'utf8');
    const publicPem = await readFile(join(dir, 'public-key.pem'), 'utf8');
    assert.match(privatePem, /^-----BEGIN PRIVATE KEY-----\n/);
    assert.match(publicPem, /^-----BEGIN PUBLIC KEY-----\n/);
    assert.equal((await stat(join(dir, 'private-key.pem'))).mode & 0o777, 0o600);
    const key = parsePrivateKey(privatePem);
    assert.equal(key.asymmetricKeyDetails?.modulusLength, 2048);
    const fingerprint = publicKeyFingerprint(createPublicKey(publicPem));
    assert.equal(publicKeyFingerprint(key), fingerprint, 'the two files are one pair');
    assert.ok(run.stdout.includes(fingerprint), 'fingerprint printed');
    assert.match(run.stdout, /next steps/);
    // The bin is not on the PATH in a checkout: the steps name the command that works there.
    assert.match(run.stdout, /run `npx signing-sidecar check`, then `npx signing-sidecar serve`/);
    assert.ok(
      !run.stdout.includes('PRIVATE KEY') && !run.stdout.includes(privatePem.split('\n')[1]!),
      'private key never printed',
    );
  });

  it('never overwrites an existing key: exit 1, both files untouched', async () => {
    const before = await readFile(join(dir, 'private-key.pem'), 'utf8');
    const run = await runCommand(keygen, ['--bits', '2048', '--out', dir]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /already exists; keygen never overwrites/);
    assert.equal(await readFile(join(dir, 'private-key.pem'), 'utf8'), before);
  });

  it('refuses when only the public file exists, and leaves no half pair behind', async () => {
    const { dir: other, cleanup: done } = await tempDir();
    try {
      await writeFile(join(other, 'public-key.pem'), 'keep me');
      const run = await runCommand(keygen, ['--bits', '2048', '--out', other]);
      assert.equal(run.code, 1);
      assert.deepEqual(await readdir(other), ['public-key.pem']);
      assert.equal(await readFile(join(other, 'public-key.pem'), 'utf8'), 'keep me');
    } finally {
      await done();
    }
  });

  it('--name writes a separate pair per environment beside the first', async () => {
    const run = await runCommand(keygen, ['--bits', '2048', '--out', dir, '--name', 'staging']);
    assert.equal(run.code, 0, run.stderr);
    const pem = await readFile(join(dir, 'staging-private-key.pem'), 'utf8');
    assert.equal(createPrivateKey(pem).asymmetricKeyDetails?.modulusLength, 2048);
  });

  it('refuses 1024 bits with exit 2 and writes nothing', async () => {
    const { dir: other, cleanup: done } = await tempDir();
    try {
      const run = await runCommand(keygen, ['--bits', '1024', '--out', other]);
      assert.equal(run.code, 2);
      assert.match(run.stderr, /--bits 1024 is refused: the gateway rejects keys under 2048 bits/);
      assert.deepEqual(await readdir(other), []);
    } finally {
      await done();
    }
  });

  it('usage errors exit 2 with the usage line; --help exits 0', async () => {
    for (const argv of [['--bits', '2500'], ['--bits', 'big'], ['--frobnicate'], ['--name', '../x'], ['extra']]) {
      const run = await runCommand(keygen, argv);
      assert.equal(run.code, 2, argv.join(' '));
      assert.match(run.stderr, /usage: signing-sidecar keygen/);
    }
    const help = await runCommand(keygen, ['--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /never overwrites/i);
  });

  it('a missing output directory is a runtime failure (exit 1)', async () => {
    const run = await runCommand(keygen, ['--bits', '2048', '--out', join(dir, 'nope')]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /does not exist/);
  });
});
