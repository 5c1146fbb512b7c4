import assert from 'node:assert/strict';
import { request } from 'node:http';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import {
  ResponseParseError,
  ResponseParser,
  ResponseTooLargeError,
  type ParserLimits,
  type ResponseHeaders,
} from '../../src/upstream/response-parser.js';
import { mulberry32 } from '../support/random.js';

/**
 * The parser is checked three ways: against the model each random response was generated from, against Node's
 * own HTTP client (llhttp) reading the very same bytes off a socket, and against hand-written edge cases.
 * Set RESPONSE_PARSER_SEED to explore other random responses; every failure names the seed of its case.
 */

const LIMITS: ParserLimits = { maxHeadBytes: 16 * 1024, maxBodyBytes: 1024 * 1024 };
const SMALL: ParserLimits = { maxHeadBytes: 128, maxBodyBytes: 10 };
const BASE_SEED = Number(process.env.RESPONSE_PARSER_SEED ?? 0x5eed_2024) >>> 0;
const FRAMED_CASES = 300;
const CLOSE_CASES = 40;

// ---------------------------------------------------------------------------------------------------------------
// Seeded randomness

class Dice {
  private readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    const item = items[this.int(0, items.length - 1)];
    if (item === undefined) throw new Error('pick from an empty list');
    return item;
  }
  bytes(length: number): Buffer {
    const out = Buffer.alloc(length);
    for (let i = 0; i < length; i++) out[i] = this.int(0, 255);
    return out;
  }
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Random valid responses, with the facts a correct parser must report

type Framing = 'length' | 'chunked' | 'none' | 'close';

interface Model {
  readonly seed: number;
  readonly bytes: Buffer;
  readonly interim: number;
  readonly status: number;
  /** Lowercase name to every value, in order, without the surrounding whitespace. */
  readonly headers: Record<string, string[]>;
  readonly body: Buffer;
  readonly framing: Framing;
  readonly keepAlive: boolean;
  readonly keepAliveHint: number | undefined;
}

const TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const NAME_POOL = ['Content-Type', 'Cache-Control', 'X-Request-Id', 'Vary', 'Link', 'Date', 'Server', 'ETag', 'Warning', "X-!#$%&'*+.^_`|~9"];
const INTERIM_HEADS = [
  'HTTP/1.1 100 Continue\r\n\r\n',
  'HTTP/1.1 100\r\n\r\n',
  'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n',
];
const CHUNK_EXTENSIONS = [';a=b', ';name', ';k="v w"', ';a=b;c=d'];

function oddCase(d: Dice, name: string): string {
  if (d.chance(0.5)) return name;
  if (d.chance(0.3)) return name.toLowerCase();
  return [...name].map((c) => (d.chance(0.5) ? c.toUpperCase() : c.toLowerCase())).join('');
}

function visibleChar(d: Dice): string {
  return String.fromCharCode(d.int(0x21, 0x7e));
}

/** Visible characters at both ends; inside, also spaces, tabs and obs-text. */
function fieldValue(d: Dice): string {
  if (d.chance(0.08)) return '';
  const length = d.int(1, 24);
  let value = visibleChar(d);
  for (let i = 2; i < length; i++) {
    if (d.chance(0.15)) value += ' ';
    else if (d.chance(0.06)) value += '\t';
    else if (d.chance(0.1)) value += String.fromCharCode(d.int(0x80, 0xff));
    else value += visibleChar(d);
  }
  return length > 1 ? value + visibleChar(d) : value;
}

function ows(d: Dice): string {
  return d.pick(['', '', ' ', ' ', '  ', '\t', ' \t ']);
}

function hexSize(d: Dice, size: number): string {
  const hex = size.toString(16);
  const cased = d.chance(0.5) ? hex.toUpperCase() : hex;
  return d.chance(0.15) ? cased.padStart(d.int(cased.length, 8), '0') : cased;
}

function encodeChunked(d: Dice, body: Buffer): Buffer {
  const parts: Buffer[] = [];
  const largest = d.pick([1, 7, 64, 500, 4096]);
  for (let at = 0; at < body.length; ) {
    const size = d.int(1, Math.min(largest, body.length - at));
    const extension = d.chance(0.25) ? d.pick(CHUNK_EXTENSIONS) : '';
    parts.push(Buffer.from(`${hexSize(d, size)}${extension}\r\n`, 'latin1'), body.subarray(at, at + size), Buffer.from('\r\n'));
    at += size;
  }
  let last = `${d.chance(0.2) ? '000' : '0'}${d.chance(0.2) ? d.pick(CHUNK_EXTENSIONS) : ''}\r\n`;
  for (let i = d.chance(0.3) ? d.int(1, 2) : 0; i > 0; i--) last += `X-Trailer-${i}:${ows(d)}${fieldValue(d)}\r\n`;
  parts.push(Buffer.from(`${last}\r\n`, 'latin1'));
  return Buffer.concat(parts);
}

function generate(seed: number, closeDelimited: boolean): Model {
  const d = new Dice(seed);
  const http10 = d.chance(0.1);
  let interim = 0;
  let head = '';
  if (d.chance(0.3)) {
    interim = d.int(1, 2);
    for (let i = 0; i < interim; i++) head += d.pick(INTERIM_HEADS);
  }

  let status: number;
  const roll = d.int(0, 9);
  if (!closeDelimited && roll === 0) status = 204;
  else if (!closeDelimited && roll === 1) status = 304;
  else
    do status = d.int(200, 599);
    while (closeDelimited && (status === 204 || status === 304));
  const bodiless = status === 204 || status === 304;
  const framing: Framing = bodiless ? 'none' : closeDelimited ? 'close' : d.chance(0.5) ? 'length' : 'chunked';
  const body = bodiless ? Buffer.alloc(0) : d.bytes(d.chance(0.1) ? d.int(1000, 6000) : d.int(0, 200));

  const fields: { name: string; value: string }[] = [];
  const used: string[] = [];
  for (let i = d.int(0, 8); i > 0; i--) {
    let name: string;
    if (used.length > 0 && d.chance(0.25)) name = d.pick(used);
    else if (d.chance(0.6)) name = d.pick(NAME_POOL);
    else {
      name = 'X-';
      for (let j = d.int(1, 10); j > 0; j--) name += d.pick([...TCHAR]);
    }
    used.push(name);
    fields.push({ name: oddCase(d, name), value: fieldValue(d) });
  }
  if (d.chance(0.3)) {
    fields.push({ name: oddCase(d, 'Set-Cookie'), value: `a=${d.int(0, 9999)}; Path=/; HttpOnly` });
    fields.push({ name: oddCase(d, 'Set-Cookie'), value: `b=${d.int(0, 9999)}; Expires=Wed, 21 Oct 2037 07:28:00 GMT` });
  }
  let close = false;
  if (d.chance(0.15)) {
    close = true;
    fields.push({ name: oddCase(d, 'Connection'), value: d.pick(['close', 'Close', 'keep-alive, close']) });
  } else if (d.chance(0.12)) {
    fields.push({ name: oddCase(d, 'Connection'), value: d.pick(['keep-alive', 'Keep-Alive']) });
  }
  let keepAliveHint: number | undefined;
  if (d.chance(0.15)) {
    keepAliveHint = d.int(0, 120);
    fields.push({ name: oddCase(d, 'Keep-Alive'), value: `timeout=${keepAliveHint}, max=${d.int(1, 1000)}` });
  }
  if (framing === 'length') fields.push({ name: oddCase(d, 'Content-Length'), value: String(body.length) });
  if (framing === 'chunked') fields.push({ name: oddCase(d, 'Transfer-Encoding'), value: d.pick(['chunked', 'Chunked', 'CHUNKED']) });
  if (status === 304 && d.chance(0.3)) fields.push({ name: oddCase(d, 'Content-Length'), value: String(d.int(1, 500)) });
  d.shuffle(fields);

  const headers: Record<string, string[]> = {};
  for (const { name, value } of fields) (headers[name.toLowerCase()] ??= []).push(value);
  const reason = d.pick(['', ' ', ' OK', ' Not Found', ' Some\tOdd  Reason', ' \xe9t\xe9', ` ${fieldValue(d)}`]);
  head += `HTTP/1.${http10 ? 0 : 1} ${status}${reason}\r\n`;
  for (const { name, value } of fields) {
    // llhttp allows only spaces around a framing field's value, not tabs: keep those to what both parsers accept.
    const framingField = /^(content-length|transfer-encoding)$/i.test(name);
    const pad = () => (framingField ? d.pick(['', ' ', '  ']) : ows(d));
    head += `${name}:${pad()}${value}${pad()}\r\n`;
  }
  head += '\r\n';
  const encoded = framing === 'chunked' ? encodeChunked(d, body) : body;
  return {
    seed,
    bytes: Buffer.concat([Buffer.from(head, 'latin1'), encoded]),
    interim,
    status,
    headers,
    body,
    framing,
    keepAlive: !http10 && !close && framing !== 'close',
    keepAliveHint,
  };
}

/** Random cut points; for about one case in ten, one byte at a time. */
function randomPieces(seed: number, bytes: Buffer): Buffer[] {
  const d = new Dice(seed ^ 0x9e3779b9);
  if (bytes.length < 2) return [bytes];
  const cuts = new Set<number>();
  if (d.chance(0.1)) for (let i = 1; i < bytes.length; i++) cuts.add(i);
  else for (let i = d.int(0, 8); i > 0; i--) cuts.add(d.int(1, bytes.length - 1));
  const sorted = [0, ...[...cuts].sort((a, b) => a - b), bytes.length];
  return sorted.slice(1).map((end, i) => bytes.subarray(sorted[i], end));
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers

function latin1(text: string): Buffer {
  return Buffer.from(text, 'latin1');
}

function asArrays(headers: ResponseHeaders): Record<string, string[]> {
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, typeof value === 'string' ? [value] : value]));
}

/** Feeds the whole input in one push, or one byte at a time; returns the parser. */
function feed(input: string | Buffer, limits: ParserLimits = LIMITS, bytewise = false): ResponseParser {
  const bytes = typeof input === 'string' ? latin1(input) : input;
  const parser = new ResponseParser(limits);
  if (!bytewise) parser.push(bytes);
  else for (let i = 0; i < bytes.length; i++) parser.push(bytes.subarray(i, i + 1));
  return parser;
}

/** Prefixes a failure with the case's seed and bytes, so it can be replayed. */
async function forCase(model: Model, check: () => void | Promise<void>): Promise<void> {
  try {
    await check();
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw new Error(`case seed ${model.seed} (RESPONSE_PARSER_SEED=${BASE_SEED}), bytes ${JSON.stringify(model.bytes.toString('latin1'))}\n${detail}`, {
      cause: error,
    });
  }
}

function isInvalid(error: unknown): true {
  assert.ok(error instanceof ResponseParseError, `expected ResponseParseError, got ${String(error)}`);
  assert.equal(error.code, 'ERR_GATEWAY_RESPONSE_INVALID');
  return true;
}

function isTooLarge(error: unknown): true {
  assert.ok(error instanceof ResponseTooLargeError, `expected ResponseTooLargeError, got ${String(error)}`);
  assert.equal(error.code, 'ERR_GATEWAY_RESPONSE_TOO_LARGE');
  return true;
}

/** Rejected whether it arrives in one piece or byte by byte. */
function assertInvalid(input: string, limits: ParserLimits = LIMITS): void {
  assert.throws(() => feed(input, limits), isInvalid, JSON.stringify(input));
  assert.throws(() => feed(input, limits, true), isInvalid, `${JSON.stringify(input)} (byte by byte)`);
}

// ---------------------------------------------------------------------------------------------------------------
// A raw TCP server that answers each request with stored bytes, read back through Node's HTTP client

interface NodeView {
  status: number;
  headers: Record<string, string[]>;
  body: Buffer;
  interim: number;
}

const answers = new Map<number, Buffer>();
let nextAnswer = 0;
let server: Server;
let port = 0;

function serve(bytes: Buffer): number {
  const id = nextAnswer++;
  answers.set(id, bytes);
  return id;
}

function startServer(): Promise<void> {
  server = createServer((socket) => {
    let received = '';
    socket.on('error', () => undefined);
    socket.on('data', (data: Buffer) => {
      received += data.toString('latin1');
      if (!received.includes('\r\n\r\n')) return;
      const id = /^POST \/(\d+) /.exec(received)?.[1];
      const bytes = id === undefined ? undefined : answers.get(Number(id));
      if (bytes === undefined) socket.destroy();
      else socket.end(bytes);
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      port = (server.address() as AddressInfo).port;
      resolve();
    }),
  );
}

function viaNode(bytes: Buffer): Promise<NodeView> {
  const id = serve(bytes);
  return new Promise((resolve, reject) => {
    let interim = 0;
    const req = request(
      { host: '127.0.0.1', port, method: 'POST', path: `/${id}`, agent: false, headers: { 'content-length': '0' } },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (part: Buffer) => parts.push(part));
        res.on('error', reject);
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            // No join logic: every value of every field, in order, as llhttp read it.
            headers: Object.fromEntries(Object.entries(res.headersDistinct).map(([name, values]) => [name, values ?? []])),
            body: Buffer.concat(parts),
            interim,
          }),
        );
      },
    );
    req.on('information', () => interim++);
    req.on('error', reject);
    req.end();
  });
}

async function inBatches<T>(items: readonly T[], width: number, run: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(run));
}

before(startServer);
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

// ---------------------------------------------------------------------------------------------------------------

describe('response parser: differential against the model and against Node (llhttp)', () => {
  it(`agrees on ${FRAMED_CASES} random valid responses framed by Content-Length, chunked, or 204/304`, async () => {
    const models = Array.from({ length: FRAMED_CASES }, (_, i) => generate(BASE_SEED + i, false));
    // The generator must actually exercise what it claims to.
    for (const framing of ['length', 'chunked', 'none'] as const) assert.ok(models.filter((m) => m.framing === framing).length >= 20, framing);
    assert.ok(models.filter((m) => m.interim > 0).length >= 30, 'interim heads');
    assert.ok(models.filter((m) => m.headers['set-cookie']?.length === 2).length >= 30, 'set-cookie twice');

    await inBatches(models, 30, (model) =>
      forCase(model, async () => {
        const parser = new ResponseParser(LIMITS);
        const pieces = randomPieces(model.seed, model.bytes);
        pieces.forEach((piece, i) => assert.equal(parser.push(piece), i === pieces.length - 1, `push #${i} of ${pieces.length}`));
        assert.equal(parser.complete, true);
        assert.equal(parser.endsWithClose, false);
        assert.equal(parser.trailing, 0);
        assert.equal(parser.status, model.status);
        assert.deepEqual(asArrays(parser.headers), model.headers);
        for (const [name, values] of Object.entries(model.headers)) {
          assert.equal(Array.isArray(parser.headers[name]), values.length > 1, `${name}: a string once, an array when repeated`);
        }
        assert.deepEqual(parser.body(), model.body);
        assert.equal(parser.keepAlive, model.keepAlive);
        assert.equal(parser.keepAliveHintSeconds, model.keepAliveHint);

        const node = await viaNode(model.bytes);
        assert.equal(node.status, parser.status);
        assert.deepEqual(node.headers, asArrays(parser.headers));
        assert.deepEqual(node.body, parser.body());
        assert.equal(node.interim, model.interim);
      }),
    );
  });

  it(`agrees on ${CLOSE_CASES} random close-delimited responses: complete only at end(), never kept alive`, async () => {
    const models = Array.from({ length: CLOSE_CASES }, (_, i) => generate(BASE_SEED + FRAMED_CASES + i, true));
    await inBatches(models, 20, (model) =>
      forCase(model, async () => {
        const parser = new ResponseParser(LIMITS);
        for (const piece of randomPieces(model.seed, model.bytes)) assert.equal(parser.push(piece), false);
        assert.equal(parser.complete, false);
        assert.equal(parser.endsWithClose, true);
        assert.equal(parser.end(), true);
        assert.equal(parser.complete, true);
        assert.equal(parser.keepAlive, false);
        assert.equal(parser.status, model.status);
        assert.deepEqual(asArrays(parser.headers), model.headers);
        assert.deepEqual(parser.body(), model.body);

        const node = await viaNode(model.bytes);
        assert.equal(node.status, parser.status);
        assert.deepEqual(node.headers, asArrays(parser.headers));
        assert.deepEqual(node.body, parser.body());
      }),
    );
  });
});

describe('response parser: where the bytes are split makes no difference', () => {
  // Chunk data that looks like framing ("\r\n0\r\n\r\n") must be taken as data.
  const tricky = latin1('\r\n0\r\n\r\n\x00\xff\r');
  const bytes = Buffer.concat([
    latin1(
      'HTTP/1.1 100 Continue\r\n\r\n' +
        'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nX-Tab:\tv\t1 \r\n\r\n' +
        '5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n',
    ),
    tricky,
    latin1('\r\n0\r\nX-Trailer: t\r\n\r\n'),
  ]);
  const expected = {
    complete: true,
    status: 200,
    headers: { 'transfer-encoding': 'chunked', 'set-cookie': ['a=1', 'b=2'], 'x-tab': 'v\t1' },
    body: Buffer.concat([latin1('hello '), tricky]),
    keepAlive: true,
    trailing: 0,
  };
  const observe = (parser: ResponseParser) => ({
    complete: parser.complete,
    status: parser.status,
    headers: { ...parser.headers },
    body: parser.body(),
    keepAlive: parser.keepAlive,
    trailing: parser.trailing,
  });

  it('in one piece', () => {
    assert.deepEqual(observe(feed(bytes)), expected);
  });

  it('in two pieces, at every possible split point', () => {
    for (let split = 0; split <= bytes.length; split++) {
      const parser = new ResponseParser(LIMITS);
      assert.equal(parser.push(bytes.subarray(0, split)), split === bytes.length, `first push, split at ${split}`);
      assert.equal(parser.push(bytes.subarray(split)), true, `second push, split at ${split}`);
      assert.deepEqual(observe(parser), expected, `split at ${split}`);
    }
  });

  it('one byte at a time', () => {
    const parser = new ResponseParser(LIMITS);
    for (let i = 0; i < bytes.length; i++) assert.equal(parser.push(bytes.subarray(i, i + 1)), i === bytes.length - 1, `byte ${i}`);
    assert.deepEqual(observe(parser), expected);
  });
});

describe('response parser: rejections (ResponseParseError, ERR_GATEWAY_RESPONSE_INVALID)', () => {
  const withLine = (line: string) => `HTTP/1.1 200 OK\r\n${line}\r\nContent-Length: 2\r\n\r\nhi`;
  const chunked = (body: string) => `HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${body}`;

  it('accepts the well-formed versions the cases below are mutated from', () => {
    assert.equal(feed(withLine('X-Foo: bar')).complete, true);
    assert.equal(feed(chunked('3\r\nabc\r\n0\r\n\r\n')).body().toString(), 'abc');
  });

  it('malformed status lines', () => {
    for (const line of ['HTTP/2 200 OK', 'HTTP/2.0 200 OK', 'HTTP/1.1 20 OK', 'HTTP/1.1 2000 OK', 'ICY 200 OK', 'http/1.1 200 OK', 'HTTP/1.1  200 OK', 'HTTP/1.1 200OK', 'HTTP/1.1 099 Low']) {
      assertInvalid(`${line}\r\nContent-Length: 0\r\n\r\n`);
    }
  });

  it('101 Switching Protocols, alone or after a 100 Continue', () => {
    assertInvalid('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n');
    assertInvalid('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n');
  });

  it('a header line without a colon, with whitespace before the colon, or with an empty name', () => {
    for (const line of ['X-Foo bar', 'X-Foo : bar', 'X-Foo\t: bar', ': bar', 'X(Foo): bar']) assertInvalid(withLine(line));
  });

  it('an obs-fold continuation line', () => {
    for (const lines of ['X-Foo: bar\r\n  baz', 'X-Foo: bar\r\n\tbaz', 'X-Foo: bar\r\n continued: yes']) assertInvalid(withLine(lines));
  });

  it('a control character inside a value', () => {
    for (const ctl of ['\x00', '\x01', '\x0b', '\x1f', '\x7f']) assertInvalid(withLine(`X-Foo: a${ctl}b`));
  });

  it('a bare LF or bare CR inside a value line', () => {
    for (const line of ['X-Foo: a\nb', 'X-Foo: a\nX-Bar: b', 'X-Foo: a\rb']) assertInvalid(withLine(line));
  });

  it('a head with bare LF line ends, at once rather than waiting for CRLF CRLF', () => {
    assertInvalid('HTTP/1.1 200 OK\ncontent-length: 2\n\nok');
  });

  it('conflicting Content-Length values, repeated or listed', () => {
    assertInvalid('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!');
    assertInvalid('HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!');
    assertInvalid('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5, 6\r\n\r\nhello!');
  });

  it('a Content-Length that is not a plain decimal number', () => {
    for (const value of ['abc', '', '-1', '+5', '0x5', '5 5', '5,', '1e3']) {
      assertInvalid(`HTTP/1.1 200 OK\r\nContent-Length: ${value}\r\n\r\nhello`);
    }
  });

  it('any transfer coding other than chunked alone', () => {
    for (const value of ['gzip', 'gzip, chunked', 'chunked, gzip', 'identity', 'chunked, chunked', '']) {
      assertInvalid(`HTTP/1.1 200 OK\r\nTransfer-Encoding: ${value}\r\n\r\n3\r\nabc\r\n0\r\n\r\n`);
    }
    assertInvalid('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n');
  });

  it('a bad chunk size line', () => {
    for (const line of ['zz', '', '-1', ' 3', '3x', '0x3']) assertInvalid(chunked(`${line}\r\nabc\r\n0\r\n\r\n`));
  });

  it('chunk data not followed by CRLF', () => {
    const afterData = [
      'X\r\n0\r\n\r\n',
      'XY0\r\n\r\n', // two stray bytes where the CRLF belongs, followed by a well-formed last chunk
      '\n\n0\r\n\r\n',
      '\n0\r\n\r\n',
      '\r\r\n0\r\n\r\n',
    ];
    for (const rest of afterData) assertInvalid(chunked(`3\r\nabc${rest}`));
  });

  it('a malformed trailer field', () => {
    assertInvalid(chunked('3\r\nabc\r\n0\r\nno colon here\r\n\r\n'));
  });

  it('a chunk size line longer than 1 KiB, even before its CRLF arrives', () => {
    const parser = new ResponseParser(LIMITS);
    parser.push(latin1(chunked('3;')));
    assert.throws(() => parser.push(latin1(`a=${'x'.repeat(1100)}`)), isInvalid);
  });

  it('a head larger than maxHeadBytes, complete or still without its terminator', () => {
    const big = `HTTP/1.1 200 OK\r\nX-Pad: ${'p'.repeat(SMALL.maxHeadBytes)}\r\nContent-Length: 0`;
    assertInvalid(`${big}\r\n\r\n`, SMALL);

    // Under the limit, an unterminated head just waits for more bytes...
    const waiting = new ResponseParser(SMALL);
    assert.equal(waiting.push(latin1('HTTP/1.1 200 OK\r\nX-Pad: pp')), false);
    // ...over it, the parser gives up at once instead of buffering without end.
    const flooded = new ResponseParser(SMALL);
    assert.throws(() => flooded.push(latin1(big)), isInvalid);
    const trickled = new ResponseParser(SMALL);
    assert.throws(() => {
      for (const byte of latin1(big)) trickled.push(Buffer.of(byte));
    }, isInvalid);
  });

  it('counts maxHeadBytes per head: interim heads do not add up', () => {
    const interim = `HTTP/1.1 103 Early Hints\r\nLink: ${'l'.repeat(80)}\r\n\r\n`;
    const parser = feed(`${interim}${interim}HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n`, SMALL);
    assert.equal(parser.complete, true);
    assert.equal(parser.status, 200);
  });
});

describe('response parser: body limits (ResponseTooLargeError, ERR_GATEWAY_RESPONSE_TOO_LARGE)', () => {
  it('a Content-Length above maxBodyBytes is refused as soon as the head is parsed', () => {
    const parser = new ResponseParser(SMALL);
    assert.throws(() => parser.push(latin1('HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n')), isTooLarge);
    assert.deepEqual(feed('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789', SMALL).body(), latin1('0123456789'));
  });

  it('chunks adding up to more than maxBodyBytes are refused, even before the data of the excess chunk', () => {
    const head = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n';
    const parser = new ResponseParser(SMALL);
    assert.equal(parser.push(latin1(`${head}6\r\nabcdef\r\n`)), false);
    assert.throws(() => parser.push(latin1('5\r\n')), isTooLarge);
    assert.throws(() => feed(`${head}6\r\nabcdef\r\n5\r\nghijk\r\n0\r\n\r\n`, SMALL, true), isTooLarge);
    assert.equal(feed(`${head}6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n`, SMALL).body().toString(), 'abcdefghij');
  });

  it('a close-delimited body growing past maxBodyBytes is refused', () => {
    const head = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n';
    const parser = new ResponseParser(SMALL);
    assert.equal(parser.push(latin1(`${head}0123456789`)), false);
    assert.throws(() => parser.push(latin1('x')), isTooLarge);
    assert.throws(() => feed(`${head}0123456789x`, SMALL), isTooLarge);

    const exact = feed(`${head}0123456789`, SMALL);
    assert.equal(exact.end(), true);
    assert.equal(exact.body().toString(), '0123456789');
  });
});

describe('response parser: completion, keep-alive and trailing bytes', () => {
  it('HTTP/1.1 is kept alive by default, with Content-Length or chunked framing', () => {
    assert.equal(feed('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi').keepAlive, true);
    assert.equal(feed('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n').keepAlive, true);
    assert.equal(feed('HTTP/1.1 204 No Content\r\n\r\n').keepAlive, true);
  });

  it('Connection: close, in any case and among other tokens, is not kept alive', () => {
    for (const value of ['close', 'Close', 'keep-alive, CLOSE', 'upgrade,close']) {
      assert.equal(feed(`HTTP/1.1 200 OK\r\nConnection: ${value}\r\nContent-Length: 0\r\n\r\n`).keepAlive, false, value);
    }
    const split = feed('HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    assert.equal(split.keepAlive, false);
    assert.equal(feed('HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n').keepAlive, true);
  });

  it('HTTP/1.0 is not kept alive', () => {
    const parser = feed('HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi');
    assert.equal(parser.complete, true);
    assert.equal(parser.keepAlive, false);
  });

  it('Transfer-Encoding: chunked beside a Content-Length: decoded as chunked, and the connection is not reused', () => {
    for (const length of ['100', '3', 'nonsense']) {
      const parser = feed(`HTTP/1.1 200 OK\r\nContent-Length: ${length}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`);
      assert.equal(parser.complete, true, length);
      assert.equal(parser.body().toString(), 'abc', length);
      assert.equal(parser.trailing, 0, length);
      assert.equal(parser.keepAlive, false, length);
    }
  });

  it('reads the Keep-Alive timeout hint', () => {
    assert.equal(feed('HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nContent-Length: 0\r\n\r\n').keepAliveHintSeconds, 5);
    assert.equal(feed('HTTP/1.1 200 OK\r\nkeep-alive: max=100,timeout=30\r\nContent-Length: 0\r\n\r\n').keepAliveHintSeconds, 30);
    assert.equal(feed('HTTP/1.1 200 OK\r\nKeep-Alive: max=100\r\nContent-Length: 0\r\n\r\n').keepAliveHintSeconds, undefined);
    assert.equal(feed('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n').keepAliveHintSeconds, undefined);
  });

  it('counts bytes after the complete response in trailing, without adding them to the body', () => {
    const parser = new ResponseParser(LIMITS);
    assert.equal(parser.push(latin1('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiEXTRA')), true);
    assert.equal(parser.trailing, 5);
    assert.equal(parser.push(latin1('MORE')), true);
    assert.equal(parser.trailing, 9);
    assert.equal(parser.body().toString(), 'hi');

    const chunked = feed('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n');
    assert.equal(chunked.body().toString(), 'hi');
    assert.equal(chunked.trailing, 'HTTP/1.1 200 OK\r\n'.length);
  });

  it('204 and 304 end with their head, whatever Content-Length or Transfer-Encoding they carry', () => {
    for (const head of ['HTTP/1.1 204 No Content\r\nContent-Length: 5', 'HTTP/1.1 304 Not Modified\r\nContent-Length: 5', 'HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked']) {
      const parser = feed(`${head}\r\n\r\nhello`);
      assert.equal(parser.complete, true, head);
      assert.equal(parser.body().length, 0, head);
      assert.equal(parser.trailing, 5, head);
    }
  });

  it('a response cut short is not complete, and end() does not complete it', () => {
    for (const cut of [
      'HTTP/1.1 200 OK\r\nContent-Len',
      'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhell',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n',
      'HTTP/1.1 100 Continue\r\n\r\n',
    ]) {
      const parser = feed(cut);
      assert.equal(parser.complete, false, cut);
      assert.equal(parser.endsWithClose, false, cut);
      assert.equal(parser.end(), false, cut);
      assert.equal(parser.complete, false, cut);
    }
  });

  it('skips interim 100 and 103 heads and reports only the final one', () => {
    const parser = feed('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 201 Created\r\nX-Final: 1\r\nContent-Length: 2\r\n\r\nok');
    assert.equal(parser.status, 201);
    assert.deepEqual({ ...parser.headers }, { 'x-final': '1', 'content-length': '2' });
    assert.equal(parser.body().toString(), 'ok');
  });

  it('accepts an identical Content-Length repeated or listed', () => {
    for (const fields of ['Content-Length: 3\r\nContent-Length: 3', 'Content-Length: 3, 3', 'Content-Length: 3,3\r\ncontent-length: 3']) {
      const parser = feed(`HTTP/1.1 200 OK\r\n${fields}\r\n\r\nabcdef`);
      assert.equal(parser.complete, true, fields);
      assert.equal(parser.body().toString(), 'abc', fields);
      assert.equal(parser.trailing, 3, fields);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Defects the first version of the parser had; each stays as a regression test.

describe('response parser: regressions', () => {
  it('a field named like an Object.prototype member (constructor, __proto__) is a header like any other', async () => {
    const bytes = latin1('HTTP/1.1 200 OK\r\nconstructor: y\r\n__proto__: x\r\nContent-Length: 2\r\n\r\nok');
    const node = await viaNode(bytes);
    assert.deepEqual(node.headers, { constructor: ['y'], ['__proto__']: ['x'], 'content-length': ['2'] });
    const parser = feed(bytes);
    assert.equal(parser.complete, true);
    assert.equal(Object.getOwnPropertyDescriptor(parser.headers, 'constructor')?.value, 'y');
    assert.equal(Object.getOwnPropertyDescriptor(parser.headers, '__proto__')?.value, 'x');
  });

  it('control characters, bare CR and bare LF at the edges of a value are refused, not trimmed away', () => {
    assertInvalid('HTTP/1.1 200 OK\r\nX-Foo: \x0bbar\r\nContent-Length: 0\r\n\r\n');
    assertInvalid('HTTP/1.1 200 OK\r\nX-Foo: bar\x0c\r\nContent-Length: 0\r\n\r\n');
    assertInvalid('HTTP/1.1 200 OK\r\nX-Foo:\nbar\r\nContent-Length: 0\r\n\r\n');
    assertInvalid('HTTP/1.1 200 OK\r\nX-Foo: bar\n\r\nContent-Length: 0\r\n\r\n');
    assertInvalid('HTTP/1.1 200 OK\r\nX-Foo: bar\r\r\nContent-Length: 0\r\n\r\n');
  });

  it('an obs-text byte 0xA0 at the edge of a value is kept, as llhttp keeps it', async () => {
    const bytes = latin1('HTTP/1.1 200 OK\r\nX-Foo: bar\xa0\r\nX-Bar: \xa0baz\r\nContent-Length: 0\r\n\r\n');
    const node = await viaNode(bytes);
    assert.deepEqual(node.headers['x-foo'], ['bar\xa0']);
    assert.deepEqual(node.headers['x-bar'], ['\xa0baz']);
    assert.deepEqual(asArrays(feed(bytes).headers), node.headers);
  });

  it('whether a head fits maxHeadBytes does not depend on how it was split', () => {
    const prefix = 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: ';
    const head = prefix + 'p'.repeat(SMALL.maxHeadBytes - prefix.length);
    assert.equal(head.length, SMALL.maxHeadBytes);
    assert.equal(feed(`${head}\r\n\r\n`, SMALL).complete, true);
    assert.equal(feed(`${head}\r\n\r\n`, SMALL, true).complete, true);
  });

  it('a chunk size with more than 8 digits of leading zeros is valid (RFC 9112 7.1: 1*HEXDIG), as llhttp reads it', async () => {
    const bytes = latin1('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0000000003\r\nabc\r\n0\r\n\r\n');
    assert.equal((await viaNode(bytes)).body.toString(), 'abc');
    assert.equal(feed(bytes).body().toString(), 'abc');
  });
});

describe('response parser: robustness', () => {
  it('empty lines before the status line are skipped, as llhttp skips them (whole or byte by byte)', () => {
    for (const bytewise of [false, true]) {
      const parser = feed('\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok', LIMITS, bytewise);
      assert.equal(parser.complete, true);
      assert.equal(parser.status, 201);
      assert.equal(parser.body().toString(), 'ok');
    }
  });
});
