import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';
import type { LogLevel } from '../../src/config/config.js';
import { createLogger } from '../../src/observability/log.js';
import { requestId } from '../../src/inbound/request-id.js';
import { logRequest, type RequestOutcome } from '../../src/egress/request-log.js';

type Line = Record<string, unknown>;

/** A logger whose every line is kept, parsed, as a log shipper would read it. */
function capturedLogger(level: LogLevel = 'info') {
  const text: string[] = [];
  const log = createLogger(level, { write: (line: string) => void text.push(line) });
  return { log, text, lines: (): Line[] => text.map((l) => JSON.parse(l) as Line) };
}

const DEPOSIT = '/api/v2/transaction/init';

describe('request log line', () => {
  it('carries the outcome fields, leaves undefined ones out, and says "request answered"', () => {
    const { log, text, lines } = capturedLogger();
    const payload = Buffer.from('{"amount":"1.00"}');
    logRequest(log, requestId('client-id:1.a_b-c'), DEPOSIT, 1.2345678, {
      status: 201,
      code: 'ok',
      attempts: 1,
      payload,
    });
    const [line] = lines();
    assert.deepEqual(
      { ...line, time: 'T' },
      {
        level: 30,
        time: 'T',
        service: 'signing-sidecar',
        event: 'request',
        requestId: 'client-id:1.a_b-c',
        route: DEPOSIT,
        status: 201,
        code: 'ok',
        attempts: 1,
        durationMs: 1.235,
        payloadBytes: payload.length,
        payloadSha256: createHash('sha256').update(payload).digest('hex'),
        msg: 'request answered',
      },
    );
    assert.match(text[0] ?? '', /\n$/, 'one line per request');
  });

  it('logs successes at info, client errors at warn and server errors at error, with every code kept', () => {
    const { log, lines } = capturedLogger();
    const id = requestId(undefined);
    const gatewayCode = 'bad "code" \\ \n \u0001 é \u2028';
    logRequest(log, id, DEPOSIT, 0, { status: 401, code: 'other', gatewayCode, attempts: 2, payload: Buffer.alloc(0) });
    const late = { status: 201, code: 'ok' };
    const unknown: RequestOutcome = {
      status: 504,
      code: 'sidecar.upstream.outcome_unknown',
      attempts: 1,
      causeCode: 'ECONNRESET',
      late,
    };
    logRequest(log, id, DEPOSIT, 30_000.0004, unknown);
    const [warn, error] = lines();
    assert.equal(warn?.level, 40);
    assert.equal(warn?.gatewayCode, gatewayCode, 'unbounded gateway text survives the JSON line intact');
    assert.equal(warn?.payloadBytes, 0);
    assert.equal(error?.level, 50);
    assert.deepEqual(
      [error?.causeCode, error?.lateStatus, error?.lateCode, error?.durationMs],
      ['ECONNRESET', 201, 'ok', 30_000],
    );
    assert.equal(error !== undefined && 'payloadSha256' in error, false);
  });

  it('writes nothing (and hashes nothing) below the configured level', () => {
    const { log, text } = capturedLogger('warn');
    logRequest(log, requestId(undefined), DEPOSIT, 1, {
      status: 200,
      code: 'ok',
      attempts: 1,
      payload: Buffer.from('{}'),
    });
    assert.deepEqual(text, []);
  });
});

describe('every line', () => {
  it('has the service, the level and an ISO 8601 time', () => {
    const { log, lines } = capturedLogger('trace');
    const before = Date.now();
    log.trace({ event: 'x' }, 'm');
    const [line] = lines();
    assert.equal(line?.service, 'signing-sidecar');
    assert.equal(line?.level, 10);
    const time = String(line?.time);
    assert.match(time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(Math.abs(Date.parse(time) - before) < 5_000);
  });

  it('censors secrets at every level, at the top, one level down, under headers and in bindings', () => {
    const { log, text } = capturedLogger('trace');
    const secret = (name: string): string => `SECRET-${name}-value`;
    const fields = {
      password: secret('password'),
      authorization: secret('authorization'),
      access_token: secret('access'),
      refresh_token: secret('refresh'),
      data: secret('data'),
      signature: secret('signature'),
      body: { password: secret('body-password'), access_token: secret('body-access'), data: secret('body-data') },
      headers: { authorization: secret('header-auth'), 'x-signature': secret('header-sig') },
      request: { headers: { authorization: secret('nested-auth'), 'x-signature': secret('nested-sig') } },
    };
    for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const)
      log[level](fields, 'with secrets');
    const child = log.child({ headers: { authorization: secret('binding-auth') } });
    child.info({ event: 'x' }, 'bound');
    logRequest(child, requestId(undefined), DEPOSIT, 1, { status: 200, code: 'ok', attempts: 1 });
    assert.equal(text.length, 8);
    for (const line of text) {
      assert.equal(line.includes('SECRET-'), false, line);
      assert.ok(line.includes('[redacted]'), line);
    }
  });
});

const LOG_MODULE = pathToFileURL(fileURLToPath(new URL('../../src/observability/log.ts', import.meta.url))).href;

/** How the parent reads the child's stdout: at once, never (the reader is gone), or only after a pause. */
type Reader = 'reads' | 'gone' | 'slow';

const SLOW_READER_PAUSE_MS = 500;

/** Reads the child's stdout the way `reader` says; resolves once the pipe is read to its end. */
function readStdout(proc: ChildProcess, reader: Reader): Promise<string> {
  const stdout = proc.stdout as Readable;
  // With the reader gone, every write to stdout fails with EPIPE.
  if (reader === 'gone') stdout.destroy();
  // Paused, the pipe fills (64 KiB) and the child's writes meet EAGAIN until reading resumes.
  if (reader === 'slow') stdout.pause();
  let text = '';
  stdout.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  if (reader === 'slow') setTimeout(() => stdout.resume(), SLOW_READER_PAUSE_MS);
  // 'close' comes after both pipes have been read to their end, not only after the exit.
  return new Promise((resolve) => proc.on('close', () => resolve(text)));
}

/** Runs `body` (ES module text, with `createLogger` imported) in a child process whose stdout is the logger's. */
async function runLogging(body: string, reader: Reader) {
  const dir = await mkdtemp(join(tmpdir(), 'sidecar-log-'));
  const child = join(dir, 'child.mts');
  await writeFile(child, `import { createLogger } from ${JSON.stringify(LOG_MODULE)};\n${body}`);
  try {
    const proc = spawn(process.execPath, ['--import', 'tsx', child], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    proc.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const stdout = await readStdout(proc, reader);
    return { code: proc.exitCode, signal: proc.signalCode, stdout, stderr };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('stdout logging', () => {
  it('has a line on stdout as soon as the call returns: a SIGKILL right after it loses nothing', async () => {
    const result = await runLogging(
      `const log = createLogger('info');
await new Promise((r) => setTimeout(r, 100));
log.info({ event: 'request', requestId: 'last-words' }, 'request answered');
process.kill(process.pid, 'SIGKILL');
`,
      'reads',
    );
    assert.equal(result.signal, 'SIGKILL', result.stderr);
    assert.match(result.stdout, /"requestId":"last-words".*"msg":"request answered"/);
  });

  it('keeps memory flat and the process alive when the log reader goes away (EPIPE): lines are dropped, not queued', async () => {
    const result = await runLogging(
      `const log = createLogger('info');
const used = () => { const m = process.memoryUsage(); return m.arrayBuffers + m.heapUsed; };
await new Promise((r) => setTimeout(r, 200)); // the parent has closed the reading end by now
const before = used();
let n = 0;
await new Promise((resolve) => {
  const step = () => {
    for (let i = 0; i < 1000; i++) log.info({ event: 'request', n: n++, pad: 'x'.repeat(300) }, 'request answered');
    if (n < 200000) setImmediate(step); else resolve(undefined);
  };
  step();
});
await new Promise((r) => setTimeout(r, 300));
process.stderr.write(JSON.stringify({ lines: n, grownMb: (used() - before) / 1e6 }) + '\\n');
process.exit(0);
`,
      'gone',
    );
    assert.equal(result.code, 0, result.stderr);
    const report = JSON.parse(result.stderr.trim().split('\n').at(-1) ?? '{}') as { lines: number; grownMb: number };
    assert.equal(report.lines, 200_000);
    // 200,000 lines of about 400 bytes: about 80 MB if they were kept.
    assert.ok(report.grownMb < 20, `memory grew by ${report.grownMb.toFixed(1)} MB`);
  });

  it('waits for a slow log reader instead of losing lines or crashing (EAGAIN)', async () => {
    const result = await runLogging(
      `void process.stdout; // as src/main.ts does: Node then makes the stdout pipe non-blocking
const log = createLogger('info');
for (let i = 0; i < 2000; i++) log.info({ event: 'request', n: i, pad: 'x'.repeat(300) }, 'request answered');
`,
      'slow',
    );
    assert.equal(result.code, 0, result.stderr);
    const numbers = result.stdout
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => (JSON.parse(line) as { n: number }).n);
    // 2,000 lines of about 420 bytes: far more than the pipe holds while nobody reads.
    assert.deepEqual(
      numbers,
      Array.from({ length: 2000 }, (_, i) => i),
    );
  });
});
