// Structured logs. The refusal line is the simulator's most useful output: it says exactly which check failed
// and why, so a vendor can fix their client. It never carries passwords, tokens, signatures or payload data.
import { pino } from 'pino';
import type { DestinationStream, Logger } from 'pino';

export type SimLogger = Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>;

/** Belt and braces: field names that must never reach a log line even if a future change passes them in. */
const REDACT = [
  'password',
  '*.password',
  'access_token',
  'refresh_token',
  'authorization',
  '*.authorization',
  'signature',
  'data',
  '*.data',
];

export function createSimLogger(destination?: DestinationStream, level = 'info'): Logger {
  const options = { name: 'gateway-simulator', level, redact: { paths: REDACT, censor: '[redacted]' } };
  return destination === undefined ? pino(options) : pino(options, destination);
}

/** Tests and library users that pass no logger get silence, not a flood on stdout. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
