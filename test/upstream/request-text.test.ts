import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { UpstreamError } from '../../src/upstream/outcome.js';
import { requestText } from '../../src/upstream/request-text.js';
import { mulberry32 } from '../support/random.js';

// The rules, header by header, as RFC 9110 states them, written as plainly as possible: requestText (with its
// ASCII fast path and its latin1 case) must accept and refuse exactly the same requests, and write the same bytes.
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const FRAMING = ['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'te', 'upgrade', 'expect'];

function reference(host: string, path: string, headers: Record<string, string>, body: string): Buffer | 'refused' {
  let head = `POST ${path} HTTP/1.1\r\nhost: ${host}\r\n`;
  for (const [name, value] of Object.entries(headers)) {
    if (!TOKEN.test(name) || !VALUE.test(value) || FRAMING.includes(name.toLowerCase())) return 'refused';
    head += `${name}: ${value}\r\n`;
  }
  head += `content-length: ${Buffer.byteLength(body)}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), Buffer.from(body, 'utf8')]);
}

function written(host: string, path: string, headers: Record<string, string>, body: string): Buffer | 'refused' {
  try {
    const text = requestText(host, { path, headers, body });
    // A string leaves as UTF-8 (gateway-connection writes it so); it must then be ASCII up to the body.
    return typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  } catch (err) {
    assert.ok(err instanceof UpstreamError && err.code === 'ERR_INVALID_UPSTREAM_REQUEST', String(err));
    return 'refused';
  }
}

const NAME_PARTS = ['x-request-id', 'user-agent', 'Accept', 'X-Custom', 'x-a', '', 'bad name', 'x:y', 'Host', 'content-length', 'TE', 'é', 'x\u0100'];
const VALUE_PARTS = ['', 'ok', 'Bearer at-1', ' spaced ', '\t', 'caf\u00e9', '\u00ff', '\r', '\n', '\0', '\u007f', 'x\u0100', '€', 'A'.repeat(344)];

describe('requestText', () => {
  it('accepts, refuses and writes exactly as the header-by-header rules, over 3,000 generated header sets', () => {
    const next = mulberry32(Number(process.env.REQUEST_TEXT_SEED ?? 20261121));
    const pick = <T>(list: readonly T[]): T => list[Math.floor(next() * list.length)]!;
    let refused = 0;
    let latin1 = 0;
    for (let i = 0; i < 3_000; i++) {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      const count = Math.floor(next() * 4);
      for (let h = 0; h < count; h++) headers[pick(NAME_PARTS) + (next() < 0.3 ? pick(NAME_PARTS) : '')] = pick(VALUE_PARTS) + (next() < 0.5 ? pick(VALUE_PARTS) : '');
      const body = next() < 0.2 ? '{"data":"é"}' : '{"data":"eyJ9"}';
      const expected = reference('gw.example:8443', '/api/v2/pay', headers, body);
      const actual = written('gw.example:8443', '/api/v2/pay', headers, body);
      assert.deepEqual(actual, expected, `case ${i}: ${JSON.stringify(headers)}`);
      if (expected === 'refused') refused++;
      else if (Object.values(headers).some((v) => /[\x80-\xff]/.test(v))) latin1++;
    }
    // Not vacuous: the generator reaches all three paths often.
    assert.ok(refused > 500 && refused < 2_500, `refused ${refused}`);
    assert.ok(latin1 > 50, `latin1 ${latin1}`);
  });

  it('forwards a mixed-case client header name as it came, and an ASCII request as one string', () => {
    const text = requestText('gw', { path: '/p', headers: { 'X-Custom': 'v', authorization: 'Bearer t' }, body: '{}' });
    assert.equal(text, 'POST /p HTTP/1.1\r\nhost: gw\r\nX-Custom: v\r\nauthorization: Bearer t\r\ncontent-length: 2\r\n\r\n{}');
  });

  it('names the refused header but never quotes its value', () => {
    assert.throws(
      () => requestText('gw', { path: '/p', headers: { 'user-agent': 'ok', authorization: 'Bearer sk_SECRET\r\nx-evil: 1' }, body: '{}' }),
      (err: Error) => /authorization/.test(err.message) && !err.message.includes('sk_SECRET'),
    );
  });
});
