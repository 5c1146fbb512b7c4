import { pino, type Level, type Logger, type DestinationStream } from 'pino';
import type { LogLevel } from '../config/config.js';
import { memoizeLast } from '../memoize-last.js';

export type { Logger };

/**
 * Paths pino censors wherever they appear. The sidecar never puts secrets in log objects on purpose
 * (Secret values print as "[redacted]", request logs carry only sizes and hashes); this list is the second
 * fence for headers or bodies that could be logged by accident in the future.
 */
const REDACT_PATHS = [
  'password',
  '*.password',
  'authorization',
  '*.authorization',
  'headers.authorization',
  'headers["x-signature"]',
  '*.headers.authorization',
  '*.headers["x-signature"]',
  'access_token',
  'refresh_token',
  '*.access_token',
  '*.refresh_token',
  'data',
  '*.data',
  'signature',
  '*.signature',
];

let cachedSecond = Number.NaN;
let cachedPrefix = '';

/** pino's isoTime, `,"time":"<ISO 8601>"`, without a Date and toISOString for every line: the text up to the
 * second is kept and only the milliseconds are appended (2 us less per request line at full load). */
export function isoTimeAt(ms: number): string {
  const second = Math.floor(ms / 1000);
  if (second !== cachedSecond) {
    cachedSecond = second;
    cachedPrefix = `,"time":"${new Date(second * 1000).toISOString().slice(0, 20)}`;
  }
  const millis = ms - second * 1000;
  return `${cachedPrefix}${millis < 10 ? '00' : millis < 100 ? '0' : ''}${millis}Z"`;
}

const isoTime = (): string => isoTimeAt(Date.now());

/** Longest a log line waits in the stdout buffer. */
const FLUSH_INTERVAL_MS = 200;

/**
 * JSON lines to stdout (or a given stream, for tests that capture every byte). Stdout is written in batches of
 * at least 4 KiB, flushed at least every FLUSH_INTERVAL_MS and synchronously on exit: one write(2) per request
 * line costs about 7% of the sidecar's CPU at full load (see README "Performance"). A hard kill can lose at
 * most the last FLUSH_INTERVAL_MS of lines; metrics are unaffected.
 */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'signing-sidecar' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    timestamp: isoTime,
  };
  return pino(options, destination ?? batchedStdout());
}

/**
 * pino's own destination (sonic-boom: exit flush, EPIPE handling, EAGAIN retries) in buffer mode, fed one
 * encoded line at a time. In its default utf8 mode sonic-boom measures the pending batch with
 * Buffer.byteLength on every write, which flattens and rescans the whole batch for each line: quadratic in the
 * batch size, about 5 KB of garbage and 2 us per request line at full load. In buffer mode it keeps the batch
 * length as a number, and the line's bytes live outside the JS heap until they are written.
 */
function batchedStdout(): DestinationStream {
  const stdout = pino.destination({ dest: 1, sync: false, minLength: 4096, contentMode: 'buffer' });
  setInterval(() => stdout.flush(), FLUSH_INTERVAL_MS).unref();
  // sonic-boom's types only describe utf8 mode; in buffer mode its write takes a Buffer. The method is looked up
  // on every line: on EPIPE (the log reader went away) pino replaces it with a no-op, and a bound copy would
  // keep queueing every line in memory instead.
  const stream = stdout as unknown as { write(chunk: Buffer): boolean; flush(cb?: (err?: Error) => unknown): void };
  return {
    write: (line: string) => stream.write(Buffer.from(line, 'utf8')),
    flush: (cb?: (err?: Error) => unknown) => stream.flush(cb),
  } as DestinationStream;
}

// pino documents its symbols for integrations that need speed; these hold the framing of every line.
const { lsCacheSym, timeSym, chindingsSym, endSym, streamSym } = pino.symbols;

function framing<T>(log: Logger, symbol: symbol): T {
  const value = (log as unknown as Record<symbol, T | undefined>)[symbol];
  // A pino upgrade that moved these would fail here (and in the line-equivalence test), not write bad lines.
  if (value === undefined) throw new Error(`pino no longer has ${symbol.toString()}`);
  return value;
}

// The request line's message never changes: it is serialised once.
const messageJson = memoizeLast((message: string) => JSON.stringify(message));

/**
 * Writes the line `log[level](fields, message)` would write, byte for byte, given `members`: the fields already
 * serialised as JSON object members without the braces (what `JSON.stringify(fields).slice(1, -1)` gives).
 * pino's level, time, bindings and end come from the logger itself. This is for the line written on every
 * request, whose members are built from a template (request-log.ts): JSON.stringify over the whole field object
 * was the largest single cost of the line. It skips the redaction pass, so it is only for fields the sidecar
 * computes itself (route, status, codes, counts, durations, payload length and SHA-256, a sanitised request id):
 * every other log call keeps going through the redacting logger. The caller checks isLevelEnabled first.
 */
export function writeLine(log: Logger, level: Level, members: string, message: string): void {
  const levelPrefix = framing<Record<number, string>>(log, lsCacheSym)[log.levels.values[level] as number] as string;
  const time = framing<() => string>(log, timeSym)();
  const bindings = framing<string>(log, chindingsSym);
  const end = framing<string>(log, endSym);
  framing<{ write(line: string): unknown }>(log, streamSym).write(`${levelPrefix}${time}${bindings},${members},"msg":${messageJson(message)}${end}`);
}
