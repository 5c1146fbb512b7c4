// The `simulate` command as a user runs it: flags, help, usage errors (exit 2), files written, clean stop.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { simulate } from '../../packages/simulator/src/cli.js';
import { PASSWORD, USERNAME, makeKeys, send } from './support.js';
import type { CommandIo } from '../../src/tools/command.js';
import type { TestKeys } from './support.js';
import { waitFor } from '../support/wait-for.js';

interface Harness {
  readonly io: CommandIo;
  stop(): void;
  stdout(): string;
  stderr(): string;
}

function harness(): Harness {
  const out = new PassThrough();
  const err = new PassThrough();
  let stdout = '';
  let stderr = '';
  out.on('data', (c: Buffer) => (stdout += c.toString()));
  err.on('data', (c: Buffer) => (stderr += c.toString()));
  let stop: (s: NodeJS.Signals) => void = () => undefined;
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => (stop = resolve));
  return {
    io: { stdout: out, stderr: err, env: {}, stopSignal },
    stop: () => stop('SIGTERM'),
    stdout: () => stdout,
    stderr: () => stderr,
  };
}

describe('simulate command', () => {
  let keys: TestKeys;
  let dir: string;
  before(async () => {
    [keys, dir] = await Promise.all([makeKeys(), mkdtemp(join(tmpdir(), 'sim-cli-'))]);
    await writeFile(join(dir, 'vendor.pub.pem'), keys.publicKeyPem);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('prints help and exits 0', async () => {
    const h = harness();
    assert.equal(await simulate(['--help'], h.io), 0);
    assert.match(h.stdout(), /--public-base-url/);
  });

  it('exits 2 on bad usage with a message', async () => {
    const cases: [string[], RegExp][] = [
      [['--bogus'], /bogus/],
      [[], /--config FILE/],
      [['--username', 'u', '--public-key', 'k'], /--password/],
      [['--config', 'x.yaml', '--username', 'u'], /cannot be combined/],
      [['--username', 'u', '--password', 'p', '--public-key', 'k', '--port', 'abc'], /--port/],
      [['--tls-cert', 'c.pem'], /go together/],
      // Values in range are checked before anything starts, so they are usage errors too (not exit 1).
      [['--username', 'u', '--password', 'p', '--public-key', 'k', '--port', '70000'], /--port .*0 to 65535.*70000/],
      [['--username', 'u', '--password', 'p', '--public-key', 'k', '--access-ttl', '0'], /--access-ttl/],
      [['--username', 'u', '--password', 'p', '--public-key', 'k', '--refresh-ttl', '0'], /--refresh-ttl/],
      [['--username', 'u', '--password', 'p', '--public-key', 'k', '--log-level', 'bogus'], /--log-level .*bogus/],
    ];
    for (const [argv, message] of cases) {
      const h = harness();
      assert.equal(await simulate(argv, h.io), 2, argv.join(' '));
      assert.match(h.stderr(), message);
      assert.match(h.stderr(), /^gateway-simulator: [^\n]+\n[^\n]*--help[^\n]*\n$/, 'one line, then the help hint');
    }
  });

  it('exits 1 when the account is refused at load', async () => {
    const h = harness();
    await writeFile(join(dir, 'not-a-key.pem'), 'nope');
    const code = await simulate(
      ['--username', USERNAME, '--password', 'p', '--public-key', join(dir, 'not-a-key.pem'), '--port', '0'],
      h.io,
    );
    assert.equal(code, 1);
    assert.match(h.stderr(), /invalid account/);
  });

  it('--host 0.0.0.0: prints that it listens on every interface, and a URL a client on this host can use', async () => {
    const h = harness();
    const argv = ['--username', USERNAME, '--password', PASSWORD, '--public-key', join(dir, 'vendor.pub.pem')];
    const running = simulate([...argv, '--host', '0.0.0.0', '--port', '0', '--log-level', 'silent'], h.io);
    try {
      await waitFor('the condition', () => h.stdout().includes('public base URL'));
      const out = h.stdout();
      const port = /^gateway simulator listening on 0\.0\.0\.0:(\d+) \(every IPv4 interface\)$/m.exec(out)?.[1];
      assert.ok(port !== undefined, out);
      assert.match(out, new RegExp(`^from this host: http://127\\.0\\.0\\.1:${port}$`, 'm'));
      assert.match(out, /^clients on other hosts also need --public-base-url .* and --allow-ip/m);
      const res = await send(`http://127.0.0.1:${port}`, { method: 'GET', path: '/_sim/health' });
      assert.equal(res.status, 200);
    } finally {
      h.stop();
    }
    assert.equal(await running, 0);
  });

  it('runs from flags over HTTPS, writes the CA and postback key, serves, and stops on the signal', async () => {
    const h = harness();
    const caOut = join(dir, 'ca.pem');
    const keyOut = join(dir, 'postback.pub.pem');
    const argv = [
      '--username',
      USERNAME,
      '--password',
      PASSWORD,
      '--public-key',
      join(dir, 'vendor.pub.pem'),
      '--port',
      '0',
      '--tls',
      '--ca-out',
      caOut,
      '--postback-key-out',
      keyOut,
      '--log-level',
      'silent',
    ];
    const running = simulate(argv, h.io);
    await waitFor('the condition', () => /listening on (https:\/\/\S+)/.test(h.stdout()));
    const listenUrl = /listening on (https:\/\/\S+)/.exec(h.stdout())?.[1] ?? '';
    const ca = await readFile(caOut, 'utf8');
    assert.match(await readFile(keyOut, 'utf8'), /BEGIN PUBLIC KEY/);
    const res = await send(listenUrl, {
      path: '/api/v2/auth/token',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant_type: 'password', username: USERNAME, password: PASSWORD }),
      ca,
    });
    assert.equal(res.status, 200);
    h.stop();
    assert.equal(await running, 0);
    await assert.rejects(send(listenUrl, { method: 'GET', path: '/_sim/health', ca }), /ECONNREFUSED/);
  });
});
