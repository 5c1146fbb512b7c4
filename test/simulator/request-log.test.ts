// The dashboard's request list: a bounded ring buffer, newest first, and what the server puts into it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { RunningSimulator } from '@signing-sidecar/simulator';
import { esc, html } from '../../packages/simulator/src/html.js';
import { REQUEST_LOG_CAPACITY, createRequestLog } from '../../packages/simulator/src/request-log.js';
import type { LoggedRequest } from '../../packages/simulator/src/request-log.js';
import { codeOf, login, makeKeys, send, signedPost, startWithAccount } from './support.js';
import type { TestKeys } from './support.js';

const entry = (n: number): LoggedRequest => ({
  at: `t${n}`,
  method: 'POST',
  path: `/p${n}`,
  ip: '127.0.0.1',
  account: undefined,
  status: 200,
  verdict: 'accepted',
  reason: '',
});

describe('the request ring buffer', () => {
  it('keeps the newest entries, newest first, before and after it wraps', () => {
    const log = createRequestLog(3);
    assert.deepEqual(log.recent(), []);
    log.record(entry(1));
    log.record(entry(2));
    assert.deepEqual(
      log.recent().map((e) => e.path),
      ['/p2', '/p1'],
    );
    for (let n = 3; n <= 7; n++) log.record(entry(n));
    assert.deepEqual(
      log.recent().map((e) => e.path),
      ['/p7', '/p6', '/p5'],
    );
  });

  it('holds 200 by default and refuses a capacity below one', () => {
    assert.equal(REQUEST_LOG_CAPACITY, 200);
    const log = createRequestLog();
    for (let n = 0; n < 250; n++) log.record(entry(n));
    assert.equal(log.recent().length, 200);
    assert.equal(log.recent()[0]?.path, '/p249');
    assert.throws(() => createRequestLog(0), RangeError);
  });
});

describe('HTML escaping', () => {
  it('escapes interpolated text and keeps interpolated markup', () => {
    assert.equal(esc(`<a href="x" title='y'>&</a>`), '&#60;a href=&#34;x&#34; title=&#39;y&#39;&#62;&#38;&#60;/a&#62;');
    const inner = html`<b>${'<i>'}</b>`;
    assert.equal(
      html`<p>${inner}${[inner, inner]}${undefined}${'"'}</p>`.html,
      '<p>' + '<b>&#60;i&#62;</b>'.repeat(3) + '&#34;</p>',
    );
  });
});

describe('what the server records', () => {
  let keys: TestKeys;
  let sim: RunningSimulator;
  before(async () => {
    keys = await makeKeys();
    sim = await startWithAccount(keys);
  });
  after(() => sim.close());

  it('lists API requests with their verdicts, not the dashboard or control API traffic', async () => {
    const token = (await login(sim)).access_token ?? '';
    const refused = await signedPost(sim, { key: keys.privateKey, token, signedBase: 'http://elsewhere.example' });
    assert.equal(codeOf(refused), 'signature.verify.failed');
    assert.equal((await send(sim.listenUrl, { method: 'GET', path: '/_sim/transactions' })).status, 200);
    const page = await send(sim.listenUrl, { method: 'GET', path: '/_sim/' });
    assert.equal(page.status, 200);
    const rows = page.text.split('<tr>').filter((r) => r.includes('/api/v2/'));
    assert.equal(rows.length, 2, 'the token request and the refused deposit');
    assert.match(rows[0] ?? '', /signature\.verify\.failed/);
    assert.match(rows[0] ?? '', /elsewhere|server signed URL is http:\/\/127\.0\.0\.1/);
    assert.match(rows[1] ?? '', /accepted/);
    assert.ok(!page.text.includes('/_sim/transactions'), 'control API calls are not listed');
  });
});
