import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';
import { createHash } from 'node:crypto';
import { createLogger, isoTimeAt, writeLine } from '../../src/observability/log.js';
import { requestId } from '../../src/proxy/request-id.js';
import { requestLineMembers, type RequestOutcome } from '../../src/proxy/request-log.js';

function capture(): { lines: string[]; write(line: string): void } {
  const lines: string[] = [];
  return { lines, write: (line: string) => void lines.push(line) };
}

const sameTime = (line: string): string => line.replace(/"time":"[^"]*"/, '"time":"T"');

describe('writeLine', () => {
  // The fields object the request line stood for before it was built from a template: pino must write the same.
  function requestFields(id: string, route: string, durationMs: number, outcome: RequestOutcome): Record<string, unknown> {
    return {
      event: 'request',
      requestId: id,
      route,
      status: outcome.status,
      code: outcome.code,
      gatewayCode: outcome.gatewayCode,
      attempts: outcome.attempts,
      causeCode: outcome.causeCode,
      durationMs: Math.round(durationMs * 1000) / 1000,
      payloadBytes: outcome.payload?.length,
      payloadSha256: outcome.payload ? createHash('sha256').update(outcome.payload).digest('hex') : undefined,
      lateStatus: outcome.late?.status,
      lateCode: outcome.late?.code,
    };
  }

  const outcomes: { route: string; durationMs: number; outcome: RequestOutcome }[] = [
    { route: '/api/v2/transaction/init', durationMs: 1.2345678, outcome: { status: 201, code: 'ok', attempts: 1, payload: Buffer.from('{"amount":"1.00"}') } },
    // A gateway's own code is unbounded text: quotes, backslashes, control and non-ASCII characters.
    {
      route: '/api/v2/transaction/init',
      durationMs: 0,
      outcome: { status: 401, code: 'FAILED', gatewayCode: 'bad "code" \\ \n \u0001 é \u2028', attempts: 2, payload: Buffer.alloc(0) },
    },
    { route: '(unmatched)', durationMs: 1e-7, outcome: { status: 404, code: 'sidecar.route_not_found', attempts: 0 } },
    {
      route: '/api/v2/p"a\\th',
      durationMs: 30_000.0004,
      outcome: { status: 504, code: 'sidecar.upstream.outcome_unknown', attempts: 1, causeCode: 'ERR_GATEWAY_CLOSED', late: { status: 201, code: 'o"k' } },
    },
  ];

  it('writes byte for byte the line pino writes for the same request fields, at every level and outcome', () => {
    const out = capture();
    const log = createLogger('info', out);
    for (const { route, durationMs, outcome } of outcomes) {
      for (const level of ['info', 'warn', 'error'] as const) {
        const id = requestId(level === 'info' ? 'client-id:1.a_b-c' : undefined);
        log[level](requestFields(id, route, durationMs, outcome), 'request answered');
        writeLine(log, level, requestLineMembers(id, route, durationMs, outcome), 'request answered');
      }
    }
    assert.equal(out.lines.length, outcomes.length * 6);
    for (let i = 0; i < out.lines.length; i += 2) assert.equal(sameTime(out.lines[i + 1]!), sameTime(out.lines[i]!));
    // Not vacuous: the lines carry the framing and the fields, and leave undefined ones out.
    const parsed = JSON.parse(out.lines[7]!) as Record<string, unknown>;
    assert.equal(parsed.level, 30);
    assert.equal(parsed.service, 'signing-sidecar');
    assert.equal(parsed.gatewayCode, outcomes[1]!.outcome.gatewayCode);
    assert.equal(parsed.payloadBytes, 0);
    assert.equal(parsed.msg, 'request answered');
    assert.equal('causeCode' in parsed, false);
    assert.match(out.lines[1]!, /\n$/);
  });

  it('escapes the message of each line it writes, when the message changes', () => {
    const out = capture();
    const log = createLogger('info', out);
    for (const message of ['first', 'a "quoted"\nmessage', 'first']) {
      log.info({ a: 1 }, message);
      writeLine(log, 'info', '"a":1', message);
    }
    for (let i = 0; i < out.lines.length; i += 2) assert.equal(sameTime(out.lines[i + 1]!), sameTime(out.lines[i]!));
  });
});

describe('isoTimeAt', () => {
  it("writes pino's isoTime text for every millisecond, across second boundaries and clock steps back", () => {
    const start = Date.UTC(2026, 10, 21, 23, 59, 58, 990);
    const instants = [...Array.from({ length: 2_100 }, (_, i) => start + i), start + 5, start - 86_400_000, start + 1_000, 0, 999, 1_000];
    for (const ms of instants) assert.equal(isoTimeAt(ms), `,"time":"${new Date(ms).toISOString()}"`, String(ms));
  });
});

describe('stdout logging', () => {
  it('keeps memory flat when the log reader goes away (EPIPE): lines are dropped, not queued', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sidecar-epipe-'));
    const child = join(dir, 'child.mts');
    const logModule = pathToFileURL(fileURLToPath(new URL('../../src/observability/log.ts', import.meta.url))).href;
    await writeFile(
      child,
      `import { createLogger } from ${JSON.stringify(logModule)};
const log = createLogger('info');
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
    );
    try {
      const proc = spawn(process.execPath, ['--import', 'tsx', child], { stdio: ['ignore', 'pipe', 'pipe'] });
      proc.stdout.destroy(); // the reader goes away: every write to stdout now fails with EPIPE
      let stderr = '';
      proc.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
      const code = await new Promise<number | null>((resolve) => proc.on('exit', resolve));
      assert.equal(code, 0, stderr);
      const report = JSON.parse(stderr.trim().split('\n').at(-1) ?? '{}') as { lines: number; grownMb: number };
      assert.equal(report.lines, 200_000);
      // 200,000 lines of about 400 bytes: about 80 MB if they were kept.
      assert.ok(report.grownMb < 20, `memory grew by ${report.grownMb.toFixed(1)} MB`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
