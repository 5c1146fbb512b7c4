import { pino, type Logger, type DestinationStream } from 'pino';
import type { LogLevel } from '../config/config.js';

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

/** JSON lines to stdout (or a given stream, for tests that capture every byte). */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'signing-sidecar' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination ? pino(options, destination) : pino(options);
}

/**
 * The per-request line is built only from values the sidecar computes itself (route, status, codes, counts,
 * durations, payload length and SHA-256, a sanitised request id), so it skips the redaction pass, which is the
 * costliest part of a log call on the hot path. Everything else keeps going through the redacting logger.
 */
export function createRequestLogger(log: Logger): Logger {
  return log.child({}, { redact: [] });
}
