import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { RecordingGateway, TEST_PASSWORD } from '../support/recording-gateway.js';
import {
  sidecarEnv,
  startTestSidecar,
  waitUntilReady,
  withReadySidecar,
  type TestSidecar,
} from '../support/sidecar.js';
import { depositJson } from '../support/payloads.js';

const exec = promisify(execFile);
const DEPOSIT = depositJson();

async function curl(url: string, args: string[]): Promise<{ status: number; body: string; headers: string }> {
  const { stdout } = await exec('curl', ['-sS', '-D', '-', '-o', '-', '-w', '\n%{http_code}', ...args, url]);
  const lines = stdout.split('\n');
  const status = Number(lines.pop());
  const text = lines.join('\n');
  const split = text.indexOf('\r\n\r\n');
  return { status, headers: text.slice(0, split), body: text.slice(split + 4) };
}

describe('signing proxy core, end to end over real sockets', () => {
  let keys: TestKeys;
  let gateway: RecordingGateway;
  let running: TestSidecar;

  before(async () => {
    keys = await makeKeys();
    gateway = await new RecordingGateway().start();
    const forwarded = { SIDECAR_FORWARD_REQUEST_HEADERS: 'X-Tenant,X-Custom,Constructor' };
    running = await startTestSidecar(await sidecarEnv(keys, `${gateway.url}/gw`, forwarded));
    await waitUntilReady(running.sidecar);
  });
  after(async () => {
    await running.stop();
    await gateway.stop();
  });

  it('a curl of plain JSON reaches the gateway signed, and the signature verifies with openssl', async () => {
    gateway.script.push({
      status: 201,
      body: { transaction_link: 'https://pay.example/t/42', id: 'tx-42' },
      headers: { 'x-trace': 'abc' },
    });
    const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      DEPOSIT,
    ]);
    // The gateway's answer comes back unchanged: status, its own headers, body bytes.
    assert.equal(answer.status, 201);
    assert.equal(answer.body, '{"transaction_link":"https://pay.example/t/42","id":"tx-42"}');
    assert.match(answer.headers, /^x-trace: abc$/m);
    // Framed by its length like the gateway's answer, not re-chunked: clients that read Content-Length get one.
    assert.match(answer.headers, new RegExp(`^content-length: ${Buffer.byteLength(answer.body)}\r?$`, 'im'));
    assert.doesNotMatch(answer.headers, /^transfer-encoding:/im);
    const recorded = gateway.requests.at(-1)!;
    assert.equal(recorded.url, '/gw/api/v2/transaction/init');
    const envelope = JSON.parse(recorded.body) as Record<string, string>;
    assert.deepEqual(Object.keys(envelope), ['data']);
    assert.equal(Buffer.from(envelope.data!, 'base64').toString('utf8'), DEPOSIT);
    assert.match(recorded.headers.authorization ?? '', /^Bearer at-/);
    assert.match(recorded.headers['x-timestamp'] as string, /^\d{10}$/);
    assert.ok(Math.abs(Number(recorded.headers['x-timestamp']) - Date.now() / 1000) < 5);
    assert.match(recorded.headers['x-nonce'] as string, /^[A-Za-z0-9_-]{22}$/);
    // Rebuild the signing string from the spec, independently of the sidecar's code, and verify with openssl.
    const signing = `POST.${gateway.url}/gw/api/v2/transaction/init.${String(recorded.headers['x-timestamp'])}.${String(recorded.headers['x-nonce'])}.${envelope.data!}`;
    await writeFile(join(keys.dir, 'signing.txt'), signing);
    await writeFile(join(keys.dir, 'signature.bin'), Buffer.from(recorded.headers['x-signature'] as string, 'base64'));
    const { stdout } = await exec('openssl', [
      'dgst',
      '-sha256',
      '-verify',
      keys.publicKeyFile,
      '-signature',
      join(keys.dir, 'signature.bin'),
      join(keys.dir, 'signing.txt'),
    ]);
    assert.match(stdout, /Verified OK/);
  });

  it('keeps the query byte for byte in the posted and signed URL', async () => {
    const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transfer-out/init?b=2&a=%2F+x`, [
      '-H',
      'Content-Type: application/json',
      '--data-binary',
      '{"amount":"1.00"}',
    ]);
    assert.equal(answer.status, 201);
    assert.equal(gateway.requests.at(-1)!.url, '/gw/api/v2/transfer-out/init?b=2&a=%2F+x');
  });

  it('forwards only the allowed client headers: never credentials, signing, hop-by-hop or client addresses', async () => {
    const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
      '-H',
      'Content-Type: application/json',
      '-H',
      'Authorization: Bearer stolen',
      '-H',
      'X-Timestamp: 1',
      '-H',
      'X-Nonce: client-nonce-000000',
      '-H',
      'X-Signature: forged',
      '-H',
      'Connection: keep-alive, X-Drop-Me, X-Custom',
      '-H',
      'X-Drop-Me: 1',
      '-H',
      'Keep-Alive: timeout=5',
      '-H',
      'Proxy-Authorization: Basic eA==',
      '-H',
      'True-Client-IP: 10.9.9.1',
      '-H',
      'X-Client-IP: 10.9.9.2',
      '-H',
      'CF-Connecting-IP: 10.9.9.3',
      '-H',
      'X-Host: internal.example',
      '-H',
      'X-Original-URL: /admin',
      '-H',
      'X-HTTP-Method-Override: DELETE',
      '-H',
      'X-Unlisted: 1',
      '-H',
      'X-Request-Id: req-123',
      '-H',
      'Accept: application/json',
      '-H',
      'Accept-Language: de-CH',
      '-H',
      'User-Agent: payments-service/1.2',
      '-H',
      'X-Tenant: t-1',
      '-H',
      'X-Custom: listed, but hop-by-hop here',
      '-H',
      'Constructor: kept too',
      '--data-binary',
      DEPOSIT,
    ]);
    assert.equal(answer.status, 201);
    assert.match(answer.headers, /^x-request-id: req-123$/m);
    const h = gateway.requests.at(-1)!.headers;
    assert.notEqual(h.authorization, 'Bearer stolen');
    assert.notEqual(h['x-timestamp'], '1');
    assert.notEqual(h['x-nonce'], 'client-nonce-000000');
    assert.notEqual(h['x-signature'], 'forged');
    assert.equal(h.host, gateway.url.replace('http://', ''));
    assert.equal(h['x-drop-me'], undefined);
    assert.equal(h['proxy-authorization'], undefined);
    assert.equal(h['keep-alive'], undefined);
    const unlisted = ['true-client-ip', 'x-client-ip', 'cf-connecting-ip', 'x-host', 'x-original-url'];
    for (const name of [...unlisted, 'x-http-method-override', 'x-unlisted']) assert.equal(h[name], undefined, name);
    assert.equal(h.accept, 'application/json');
    assert.equal(h['accept-language'], 'de-CH');
    assert.equal(h['user-agent'], 'payments-service/1.2');
    assert.equal(h['x-tenant'], 't-1', 'listed in SIDECAR_FORWARD_REQUEST_HEADERS');
    assert.equal(h['x-custom'], undefined, 'listed in SIDECAR_FORWARD_REQUEST_HEADERS, but named in Connection');
    assert.equal(
      Object.hasOwn(h, 'constructor') ? h.constructor : undefined,
      'kept too',
      'a header named like an Object member is a header',
    );
    assert.equal(h['x-request-id'], 'req-123');
  });

  const refusals: Array<[string, string, string[], number, string]> = [
    [
      'unknown path',
      '/api/v2/other',
      ['-H', 'Content-Type: application/json', '--data-binary', '{}'],
      404,
      'sidecar.route.not_found',
    ],
    [
      'token endpoint is not proxied',
      '/api/v2/auth/token',
      ['-H', 'Content-Type: application/json', '--data-binary', '{}'],
      404,
      'sidecar.route.not_found',
    ],
    [
      'trailing slash is another path',
      '/api/v2/transaction/init/',
      ['-H', 'Content-Type: application/json', '--data-binary', '{}'],
      404,
      'sidecar.route.not_found',
    ],
    ['GET on a signed route', '/api/v2/transaction/init', [], 405, 'sidecar.method.not_allowed'],
    [
      'PUT on a signed route',
      '/api/v2/transaction/init',
      ['-X', 'PUT', '-H', 'Content-Type: application/json', '--data-binary', '{}'],
      405,
      'sidecar.method.not_allowed',
    ],
    [
      'invalid JSON',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type: application/json', '--data-binary', '{"amount":'],
      400,
      'sidecar.body.invalid_json',
    ],
    [
      'JSON array',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type: application/json', '--data-binary', '[1,2]'],
      400,
      'sidecar.body.not_object',
    ],
    [
      'JSON string',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type: application/json', '--data-binary', '"x"'],
      400,
      'sidecar.body.not_object',
    ],
    [
      'invalid UTF-8',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type: application/json', '--data-binary', '@-'],
      400,
      'sidecar.body.invalid_json',
    ],
    [
      'form content type',
      '/api/v2/transaction/init',
      ['--data-binary', '{}'],
      415,
      'sidecar.body.unsupported_media_type',
    ],
    [
      'missing content type',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type:', '--data-binary', '{}'],
      415,
      'sidecar.body.unsupported_media_type',
    ],
    [
      'a charset other than UTF-8',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type: application/json; charset=utf-16', '--data-binary', '{}'],
      415,
      'sidecar.body.unsupported_media_type',
    ],
    [
      'a body starting with a UTF-8 byte order mark',
      '/api/v2/transaction/init',
      ['-H', 'Content-Type: application/json', '--data-binary', '\ufeff{"amount":"1.00"}'],
      400,
      'sidecar.body.invalid_json',
    ],
  ];
  for (const contentType of [
    'application/json; charset=utf-8',
    'application/json;charset="UTF-8"',
    'Application/JSON',
  ]) {
    it(`accepts Content-Type: ${contentType}`, async () => {
      gateway.script.push({ status: 201, body: { ok: true } });
      const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '-H',
        `Content-Type: ${contentType}`,
        '--data-binary',
        DEPOSIT,
      ]);
      assert.equal(answer.status, 201);
    });
  }

  for (const [name, path, args, status, code] of refusals) {
    it(`refuses ${name} with ${status} ${code}, and the gateway receives nothing`, async () => {
      const before = gateway.requests.length;
      const answer: { status: number; body: string; headers?: string } =
        name === 'invalid UTF-8'
          ? await rawPost(
              running.sidecar.egressUrl,
              path,
              Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]),
            )
          : await curl(`${running.sidecar.egressUrl}${path}`, args);
      assert.equal(answer.status, status);
      const body = JSON.parse(answer.body) as { code: string; retryable: boolean; message: string };
      assert.equal(body.code, code);
      assert.equal(body.retryable, true);
      assert.ok(body.message.length > 0);
      assert.equal(gateway.requests.length, before);
      if (answer.headers !== undefined) {
        // Every answer, errors included, can be traced and is framed by its length.
        assert.match(answer.headers, /^x-request-id: [0-9a-f]{16}-[0-9a-z]+\r?$/m);
        assert.match(answer.headers, new RegExp(`^content-length: ${Buffer.byteLength(answer.body)}\\r?$`, 'im'));
        if (status === 405) assert.match(answer.headers, /^allow: POST\r?$/im);
      }
    });
  }

  it('refuses a body over the limit with 413 and forwards nothing', async () => {
    const before = gateway.requests.length;
    const big = JSON.stringify({ pad: 'x'.repeat(1_048_576) });
    const answer = await rawPost(running.sidecar.egressUrl, '/api/v2/transaction/init', Buffer.from(big));
    assert.equal(answer.status, 413);
    assert.equal((JSON.parse(answer.body) as { code: string }).code, 'sidecar.body.too_large');
    assert.equal(gateway.requests.length, before);
  });

  it('ignores an absolute-form request line and the Host header: the configured gateway is the only destination', async () => {
    const decoy = await new RecordingGateway().start();
    try {
      const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '--request-target',
        `${decoy.url}/api/v2/transaction/init`,
        '-H',
        'Content-Type: application/json',
        '--data-binary',
        DEPOSIT,
      ]);
      assert.equal(answer.status, 201);
      assert.equal(decoy.requests.length, 0);
      assert.equal(gateway.requests.at(-1)!.url, '/gw/api/v2/transaction/init');
    } finally {
      await decoy.stop();
    }
  });

  it('never writes the password, tokens, signature or data to its logs', () => {
    const text = running.logs.text;
    assert.ok(text.length > 0);
    assert.equal(text.includes(TEST_PASSWORD), false);
    for (const token of gateway.issuedAccessTokens) assert.equal(text.includes(token), false);
    for (const r of gateway.requests) {
      assert.equal(text.includes(r.headers['x-signature'] as string), false);
      assert.equal(text.includes((JSON.parse(r.body) as { data: string }).data), false);
    }
    assert.equal(text.includes('PRIVATE KEY'), false);
  });
});

describe('upstream failures map to the error contract', () => {
  it('connection refused: 502 sidecar.upstream.unreachable, retryable, after retrying within the deadline', async () => {
    await withReadySidecar({ SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS: '600' }, async ({ gateway, running }) => {
      await gateway.stop(); // the token is held; now nothing listens at the gateway's address
      const started = Date.now();
      const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '-H',
        'Content-Type: application/json',
        '--data-binary',
        DEPOSIT,
      ]);
      assert.equal(answer.status, 502);
      assert.deepEqual(JSON.parse(answer.body), {
        code: 'sidecar.upstream.unreachable',
        message: 'could not connect to the gateway; nothing was sent',
        retryable: true,
      });
      assert.ok(Date.now() - started >= 100, 'retried with backoff before giving up');
      const metrics = await (await fetch(`${running.sidecar.adminUrl}/metrics`)).text();
      assert.match(metrics, /signing_sidecar_retries_total\{reason="connect_failed"\} [1-9]/);
    });
  });

  it('reset after the request was sent: 502 sidecar.upstream.outcome_unknown, not retryable, sent exactly once', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      gateway.script.push({ reset: true });
      const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '-H',
        'Content-Type: application/json',
        '--data-binary',
        DEPOSIT,
      ]);
      assert.equal(answer.status, 502);
      const body = JSON.parse(answer.body) as { code: string; retryable: boolean };
      assert.equal(body.code, 'sidecar.upstream.outcome_unknown');
      assert.equal(body.retryable, false);
      assert.equal(gateway.requests.length, 1);
      const line = running.logs.lines().find((l) => l.event === 'request');
      assert.equal(line?.causeCode, 'ECONNRESET', 'the log line names why the outcome is unknown');
    });
  });

  it('no answer within the response timeout: 504 outcome_unknown, sent exactly once', async () => {
    await withReadySidecar({ SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS: '300' }, async ({ gateway, running }) => {
      gateway.script.push({ hang: true });
      const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '-H',
        'Content-Type: application/json',
        '--data-binary',
        DEPOSIT,
      ]);
      assert.equal(answer.status, 504);
      assert.equal((JSON.parse(answer.body) as { code: string }).code, 'sidecar.upstream.outcome_unknown');
      assert.equal(gateway.requests.length, 1);
      const line = running.logs.lines().find((l) => l.event === 'request');
      assert.equal(line?.causeCode, 'ERR_GATEWAY_RESPONSE_TIMEOUT');
    });
  });

  it('shutdown with a request still waiting for the gateway: the client gets 504 outcome_unknown, never silence', async () => {
    await withReadySidecar({ SIDECAR_SHUTDOWN_MAX_DELAY_MS: '300' }, async ({ gateway, running }) => {
      gateway.script.push({ hang: true });
      const pending = curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '-H',
        'Content-Type: application/json',
        '--data-binary',
        DEPOSIT,
      ]);
      while (gateway.requests.length === 0) await new Promise((r) => setTimeout(r, 10));
      await running.stop();
      const answer = await pending;
      assert.equal(answer.status, 504);
      // Shutdown answers on the handler's behalf, with the same request id the log line carries.
      const id = /^x-request-id: (\S+)\r?$/m.exec(answer.headers)?.[1];
      assert.ok(id !== undefined, 'the 504 carries the request id');
      const line = running.logs.lines().find((l) => l.event === 'request' && l.requestId === id);
      assert.equal(line?.status, 504);
      assert.equal(line?.causeCode, 'ERR_SIDECAR_SHUTDOWN');
      // What the handler saw once the pool was torn down is kept beside it.
      assert.equal(line?.lateCode, 'sidecar.upstream.outcome_unknown');
      assert.equal(typeof line?.lateStatus, 'number');
      assert.deepEqual(JSON.parse(answer.body), {
        code: 'sidecar.upstream.outcome_unknown',
        message: 'the request was sent but no answer came back; the transaction may exist: check before sending again',
        retryable: false,
      });
      assert.ok(running.logs.lines().some((l) => l.event === 'shutdown.done' && l.answeredOutcomeUnknown === 1));
    });
  });

  it('passes the bytes of the gateway answer through exactly, multi-byte UTF-8 and invalid bytes included', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const raw = Buffer.concat([
        Buffer.from('{"note":"paiement reçu ✓","bytes":"'),
        Buffer.from([0xff, 0x00, 0x80]),
        Buffer.from('"}'),
      ]);
      gateway.script.push({ status: 201, raw });
      const response = await fetch(`${running.sidecar.egressUrl}/api/v2/transaction/init`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: DEPOSIT,
      });
      assert.equal(response.status, 201);
      assert.equal(response.headers.get('content-length'), String(raw.length));
      assert.deepEqual(Buffer.from(await response.arrayBuffer()), raw);
    });
  });

  it('a 5xx from the gateway is passed through unchanged and not retried', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      gateway.script.push({ status: 503, body: { code: 'busy', message: 'try later' } });
      const answer = await curl(`${running.sidecar.egressUrl}/api/v2/transaction/init`, [
        '-H',
        'Content-Type: application/json',
        '--data-binary',
        DEPOSIT,
      ]);
      assert.equal(answer.status, 503);
      assert.equal(answer.body, '{"code":"busy","message":"try later"}');
      assert.equal(gateway.requests.length, 1);
    });
  });
});

/** A POST with exact bytes (curl cannot send invalid UTF-8 portably from an argument). */
async function rawPost(base: string, path: string, body: Buffer): Promise<{ status: number; body: string }> {
  const response = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  return { status: response.status, body: await response.text() };
}
