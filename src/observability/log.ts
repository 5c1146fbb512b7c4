import { pino, type Logger, type DestinationStream } from 'pino';
import type { LogLevel } from '../config/config.js';
import { isoTimestamp } from '../time/utc-time.js';

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
  'headers["idempotency-key"]',
  '*.headers["idempotency-key"]',
];

/**
 * JSON lines to stdout (or a given stream, for tests that capture every byte). Each line is written to stdout
 * with one write(2) before the log call returns, so a request's line is in the pipe before the next event-loop
 * turn: a hard kill (OOM, SIGKILL after the grace period) right after an answer still leaves that answer's line
 * in the captured output. Every line goes through pino's redaction.
 */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'signing-sidecar' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    // pino's isoTime, without Date's toISOString (src/time/utc-time.ts).
    timestamp: () => `,"time":"${isoTimestamp(Date.now())}"`,
  };
  return pino(options, destination ?? pino.destination({ dest: 1, sync: true }));
}
