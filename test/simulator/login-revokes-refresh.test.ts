// `--login-revokes-refresh`: a gateway on which only the newest password login's chain works. Without the flag an
// older refresh token outlives a newer login (the default reading of spec 4.1); with it, the login revokes it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { PASSWORD, USERNAME, codeOf, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { RawResponse, TestKeys } from './support.js';
import type { RunningSimulator } from '@signing-sidecar/simulator';
import type { CommandIo } from '../../src/tools/command.js';
import { simulate } from '../../packages/simulator/src/cli.js';
import { scratchDir } from '../support/scratch.js';

function refresh(sim: RunningSimulator, token: string | undefined): Promise<RawResponse> {
  return send(sim.listenUrl, {
    path: '/api/v2/auth/token',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ grant_type: 'refresh_token', refresh_token: token }),
  });
}

describe('simulator --login-revokes-refresh', () => {
  let keys: TestKeys;
  let strict: RunningSimulator;
  let lenient: RunningSimulator;
  before(async () => {
    keys = await makeKeys();
    strict = await startWithAccount(keys, { loginRevokesRefresh: true });
    lenient = await startWithAccount(keys);
  });
  after(async () => {
    await strict.close();
    await lenient.close();
  });

  it('a password login revokes every earlier refresh token, also ones that came from a refresh', async () => {
    const first = await login(strict);
    const rotated = await refresh(strict, first.refresh_token);
    assert.equal(rotated.status, 200, rotated.text);
    const chained = rotated.json() as Record<string, string>;
    const second = await login(strict);
    const revoked = await refresh(strict, chained.refresh_token);
    assert.equal(revoked.status, 401);
    assert.equal(codeOf(revoked), 'FAILED');
    assert.match(String(revoked.json().message), /revoked by a newer password login/);
    const stale = await signedPost(strict, { key: keys.privateKey, token: chained.access_token ?? '' });
    assert.equal(codeOf(stale), 'FAILED', 'earlier access tokens are superseded as always');
    // The newest login's chain works: its refresh token, and the access token that refresh brings.
    const newest = await refresh(strict, second.refresh_token);
    assert.equal(newest.status, 200, newest.text);
    const paid = await signedPost(strict, { key: keys.privateKey, token: String(newest.json().access_token) });
    assert.equal(paid.status, 200, paid.text);
  });

  it('counts successful grants per kind', async () => {
    const before = strict.tokenGrants();
    const tokens = await login(strict);
    assert.equal((await refresh(strict, tokens.refresh_token)).status, 200);
    assert.equal((await refresh(strict, tokens.refresh_token)).status, 401, 'a refused grant is not counted');
    assert.deepEqual(strict.tokenGrants(), { password: before.password + 1, refresh: before.refresh + 1 });
  });

  it('without the flag an older refresh token outlives a newer login (the default)', async () => {
    const first = await login(lenient);
    await login(lenient);
    const older = await refresh(lenient, first.refresh_token);
    assert.equal(older.status, 200, older.text);
  });

  it('`simulate --login-revokes-refresh` starts a simulator that revokes earlier refresh tokens', async () => {
    const dir = scratchDir('sim-revoke-');
    await writeFile(join(dir, 'vendor.pub.pem'), keys.publicKeyPem);
    let stdout = '';
    const out = new PassThrough().on('data', (c: Buffer) => (stdout += c.toString()));
    let stop: (s: NodeJS.Signals) => void = () => undefined;
    const stopSignal = new Promise<NodeJS.Signals>((resolve) => (stop = resolve));
    const io: CommandIo = { stdout: out, stderr: new PassThrough(), env: {}, stopSignal };
    const argv = ['--username', USERNAME, '--password', PASSWORD, '--public-key', join(dir, 'vendor.pub.pem')];
    const running = simulate([...argv, '--port', '0', '--log-level', 'silent', '--login-revokes-refresh'], io);
    try {
      const deadline = Date.now() + 5_000;
      while (!/listening on (http:\/\/\S+)/.test(stdout) && Date.now() < deadline) await sleep(10);
      const listenUrl = /listening on (http:\/\/\S+)/.exec(stdout)?.[1] ?? '';
      const grant = (body: object) =>
        send(listenUrl, {
          path: '/api/v2/auth/token',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const first = (await grant({ grant_type: 'password', username: USERNAME, password: PASSWORD })).json();
      assert.equal((await grant({ grant_type: 'password', username: USERNAME, password: PASSWORD })).status, 200);
      const revoked = await grant({ grant_type: 'refresh_token', refresh_token: first.refresh_token });
      assert.equal(revoked.status, 401, revoked.text);
    } finally {
      stop('SIGTERM');
    }
    assert.equal(await running, 0);
    const help = new PassThrough();
    let helpText = '';
    help.on('data', (c: Buffer) => (helpText += c.toString()));
    assert.equal(await simulate(['--help'], { ...io, stdout: help }), 0);
    assert.match(helpText, /--login-revokes-refresh/);
  });
});
