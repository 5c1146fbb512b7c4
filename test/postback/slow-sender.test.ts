// Senders that hold the receiver: a head that never ends and a body that trickles are cut by the receiver's own
// deadlines (shortened here through the test hook; 10 s and 15 s in production), and nothing is delivered.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { gatewayKeys, PATH, signPostback, startBareReceiver, type BareReceiver } from './support.js';

let world: BareReceiver;
let port: number;
let privateKeyPem: string;

before(async () => {
  const gateway = await gatewayKeys();
  privateKeyPem = gateway.privateKeyPem;
  world = await startBareReceiver(gateway, { listener: { headersTimeout: 300, requestTimeout: 600 } });
  port = Number(new URL(world.receiverUrl).port);
});
after(() => world.stop(100));

/** Writes `chunks` with `gapMs` between them; resolves with what the receiver answered and when it closed. */
function trickle(chunks: string[], gapMs: number): Promise<{ text: string; ms: number }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect(port, '127.0.0.1');
    let text = '';
    let timer: NodeJS.Timeout | undefined;
    socket.on('data', (d: Buffer) => (text += d.toString('utf8')));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ text, ms: Date.now() - started });
    });
    let i = 0;
    const next = () => {
      if (socket.destroyed || i >= chunks.length) return;
      socket.write(chunks[i++]!);
      timer = setTimeout(next, gapMs);
    };
    next();
  });
}

describe('slow senders', () => {
  test('a request head that never ends is cut at the header deadline', async () => {
    const result = await trickle(
      [`POST ${PATH} HTTP/1.1\r\n`, 'Host: x\r\n', 'X-A: 1\r\n', 'X-B: 2\r\n', 'X-C: 3\r\n'],
      400,
    );
    assert.ok(result.ms < 3_000, `closed after ${result.ms} ms`);
    assert.match(result.text, /^HTTP\/1\.1 408/);
  });

  test('a body that trickles in past the request deadline is cut with 408 and nothing is delivered', async () => {
    const postback = await signPostback(privateKeyPem);
    const head =
      `POST ${PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      Object.entries(postback.headers)
        .filter(([name]) => name !== 'content-type')
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join('') +
      `Content-Length: ${postback.body.length}\r\n\r\n`;
    const body = postback.body.match(/.{1,8}/g) ?? [];
    const result = await trickle([head, ...body], 200);
    assert.ok(result.ms < 4_000, `closed after ${result.ms} ms`);
    assert.match(result.text, /^HTTP\/1\.1 408/);
    assert.equal(world.application.received.length, 0);
  });

  test('a sender refused before its body is read (404, 405) cannot go on streaming it: the connection closes', async () => {
    for (const start of ['POST /elsewhere', `GET ${PATH}`]) {
      const chunk = `4000\r\n${'A'.repeat(0x4000)}\r\n`;
      const head = `${start} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n`;
      const result = await trickle([head, ...Array.from({ length: 100 }, () => chunk)], 20);
      assert.match(result.text, /^HTTP\/1\.1 40[45] /, start);
      assert.match(result.text, /\r\nconnection: close\r\n/i, `${start}: the answer closes the connection`);
      assert.ok(result.ms < 500, `${start}: closed after ${result.ms} ms, before the request deadline (600 ms)`);
    }
  });
});
