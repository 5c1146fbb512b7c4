// An answer's bytes as the client receives them: whatever the body (a Buffer of any byte values, small or large, or a
// UTF-8 string) and however the answer ends (at once, or after the rest of the request's body), the client gets
// exactly the bytes it was given, framed by their length. Real sockets on 127.0.0.1.
import assert from 'node:assert/strict';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { writeAnswer, type Answer, type AnswerEnding } from '../../src/inbound/answer.js';
import { closeNow, listenOnLoopback } from '../support/loopback-server.js';

/** Every byte value, the high half included: not valid UTF-8, so any decoding on the way would change it. */
const EVERY_BYTE = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
const UTF8_TEXT = '{"message":"Gebühr 5 € abgelehnt","emoji":"💳"}';
/** Larger than a socket's usual first write. */
const LARGE = Buffer.concat(Array.from({ length: 100 }, () => EVERY_BYTE));

const answers: Record<string, { answer: () => Answer; ending: AnswerEnding }> = {
  '/bytes-now': { answer: () => ({ status: 201, headers: {}, body: EVERY_BYTE }), ending: 'now' },
  '/bytes-after-body': { answer: () => ({ status: 201, headers: {}, body: EVERY_BYTE }), ending: 'after-unread-body' },
  '/large-bytes': { answer: () => ({ status: 200, headers: {}, body: LARGE }), ending: 'now' },
  '/text': {
    answer: () => ({ status: 200, headers: { 'content-type': 'application/json' }, body: UTF8_TEXT }),
    ending: 'now',
  },
  // Answered on the headers alone, while the body is still arriving: written at once, ended once the body is in.
  '/bytes-early': {
    answer: () => ({ status: 413, headers: { connection: 'close' }, body: EVERY_BYTE }),
    ending: 'after-unread-body',
  },
};

let server: Server;
let origin: string;

before(async () => {
  server = createServer((req, res) => {
    const chosen = answers[req.url ?? ''];
    if (chosen === undefined) return void res.writeHead(404).end();
    const answer = () => writeAnswer(req, res, chosen.answer(), chosen.ending);
    if (req.url === '/bytes-early') answer();
    else req.resume().on('end', answer);
  });
  origin = await listenOnLoopback(server);
});
after(() => closeNow(server));

interface Received {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

/** POSTs `sent` (all of it, or the first half of a declared length when `partly`), and reads the whole answer. */
function post(path: string, sent: Buffer, partly = false): Promise<Received> {
  return new Promise((resolve, reject) => {
    const req = request(`${origin}${path}`, { method: 'POST', headers: { 'content-length': sent.length } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
        req.destroy();
      });
      res.on('error', reject);
    });
    req.on('error', (error) => (partly ? undefined : reject(error)));
    if (partly) req.write(sent.subarray(0, sent.length / 2));
    else req.end(sent);
  });
}

describe('writeAnswer: the bytes given are the bytes received', () => {
  it('a Buffer body of every byte value, byte for byte, with its Content-Length', async () => {
    for (const path of ['/bytes-now', '/bytes-after-body']) {
      const received = await post(path, Buffer.from('{}'));
      assert.equal(received.status, 201, path);
      assert.ok(received.body.equals(EVERY_BYTE), `${path}: the body's bytes unchanged`);
      assert.equal(received.headers['content-length'], '256', path);
    }
  });

  it('a large Buffer body (25.6 KB) too', async () => {
    const received = await post('/large-bytes', Buffer.from('{}'));
    assert.ok(received.body.equals(LARGE));
    assert.equal(received.headers['content-length'], String(LARGE.length));
  });

  it('a string body goes as UTF-8, its Content-Length in bytes', async () => {
    const received = await post('/text', Buffer.from('{}'));
    assert.equal(received.status, 200);
    assert.ok(received.body.equals(Buffer.from(UTF8_TEXT, 'utf8')));
    assert.equal(received.headers['content-length'], String(Buffer.byteLength(UTF8_TEXT)));
    assert.equal(received.headers['content-type'], 'application/json');
  });

  it('an answer written while the request body is still arriving reaches the client whole', async () => {
    const received = await post('/bytes-early', Buffer.alloc(64 * 1024, 0x61), true);
    assert.equal(received.status, 413);
    assert.ok(received.body.equals(EVERY_BYTE));
    assert.equal(received.headers['content-length'], '256');
  });
});
