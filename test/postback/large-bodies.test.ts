// Senders that hold large bodies open: the receiver buffers at most its pool (the memory budget's share) of them at once
// (beyond the small allowance every body has), so that they cannot take the pod past its memory limit. A further
// large body is answered 503 at once without being read; a genuine postback, a few hundred bytes, still goes through.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import {
  POSTBACK_FREE_BODY_BYTES as FREE_BODY_BYTES,
  POSTBACK_MAX_BODY_BYTES as MAX_POSTBACK_BYTES,
} from '../../src/memory/budget.js';
import { deliver, gatewayKeys, PATH, signPostback, startBareReceiver, type BareReceiver } from './support.js';

let world: BareReceiver;
let privateKeyPem: string;

before(async () => {
  const gateway = await gatewayKeys();
  privateKeyPem = gateway.privateKeyPem;
  world = await startBareReceiver(gateway);
});
after(() => world.stop(100));

const port = () => Number(new URL(world.receiverUrl).port);
const head = (length: number) =>
  `POST ${PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

interface Holder {
  readonly socket: Socket;
  /** What the receiver answered this holder, if anything. */
  answer: string;
}

/** A sender that declares a body of the limit and sends half of it, then holds the connection. */
function holdLargeBody(): Holder {
  const socket = connect(port(), '127.0.0.1');
  const holder: Holder = { socket, answer: '' };
  socket.on('data', (d: Buffer) => (holder.answer += d.toString('latin1')));
  socket.on('error', () => undefined);
  socket.write(head(MAX_POSTBACK_BYTES) + 'A'.repeat(MAX_POSTBACK_BYTES / 2));
  return holder;
}

/**
 * One holder more than the budget fits: once the receiver has turned one of them away, every other one holds its
 * share, whatever order they arrived in, and the budget is full.
 */
async function fillBudget(): Promise<Holder[]> {
  const fit = Math.floor(world.bodyPoolBytes / (MAX_POSTBACK_BYTES - FREE_BODY_BYTES));
  const holders = Array.from({ length: fit + 1 }, () => holdLargeBody());
  const until = Date.now() + 5_000;
  while (!holders.some((h) => h.answer !== '')) {
    if (Date.now() > until) {
      for (const h of holders) h.socket.destroy();
      throw new Error(`none of ${fit + 1} senders holding ${MAX_POSTBACK_BYTES} bytes was turned away`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  const turnedAway = holders.filter((h) => h.answer !== '');
  assert.equal(turnedAway.length, 1, 'exactly one holder past the budget');
  assert.match(turnedAway[0]!.answer, /^HTTP\/1\.1 503 /);
  return holders;
}

/** Sends a whole large body; resolves with the status line and whether the receiver closed the connection. */
function sendLargeBody(): Promise<{ statusLine: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = connect(port(), '127.0.0.1');
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('error', () => undefined);
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ statusLine: text.split('\r\n', 1)[0] ?? '', closed: false });
    }, 5_000);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ statusLine: text.split('\r\n', 1)[0] ?? '', closed: true });
    });
    socket.write(head(MAX_POSTBACK_BYTES) + 'A'.repeat(MAX_POSTBACK_BYTES));
  });
}

describe('large bodies held open', () => {
  test('past the budget a large body is answered 503 unread; a genuine postback still gets through', async () => {
    const holders = await fillBudget();
    try {
      const refused = await sendLargeBody();
      assert.match(refused.statusLine, /^HTTP\/1\.1 503 /);
      assert.ok(refused.closed, 'the connection is closed instead of reading the body');
      // As the gateway sees it: the sidecar's error shape, and a redelivery asked for.
      const res = await fetch(`${world.receiverUrl}${PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        // Just more than the room the holders leave (a 1 MiB body would still be in flight when the receiver closes).
        body: 'A'.repeat(FREE_BODY_BYTES + (world.bodyPoolBytes % (MAX_POSTBACK_BYTES - FREE_BODY_BYTES)) + 1),
      });
      assert.equal(res.status, 503);
      assert.equal(res.headers.get('retry-after'), '5');
      const body = (await res.json()) as Record<string, unknown>;
      assert.equal(body.code, 'postback.receiver.busy');
      assert.equal(body.retryable, true);
      assert.equal(typeof body.message, 'string');
      assert.match(
        await world.metrics.registry.getSingleMetricAsString('signing_sidecar_postbacks_total'),
        /outcome="busy"} 3/,
      );
      const genuine = await deliver(world.receiverUrl, await signPostback(privateKeyPem));
      assert.equal(genuine.status, 200);
      assert.deepEqual(genuine.body, { status: 'forwarded' });
    } finally {
      for (const holder of holders) holder.socket.destroy();
    }
    // The budget is given back when the held bodies end: a large body is read and judged again (here: unsigned).
    const until = Date.now() + 5_000;
    let again = await sendLargeBody();
    while (/ 503 /.test(again.statusLine) && Date.now() < until) again = await sendLargeBody();
    assert.match(again.statusLine, /^HTTP\/1\.1 401 /);
  });
});
