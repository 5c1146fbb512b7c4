import { pino } from 'pino';
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
export function createLogger(level, destination) {
    const options = {
        level,
        base: { service: 'signing-sidecar' },
        redact: { paths: REDACT_PATHS, censor: '[redacted]' },
        timestamp: pino.stdTimeFunctions.isoTime,
    };
    return destination ? pino(options, destination) : pino(options, pino.destination({ dest: 1, sync: false, minLength: 4096 }));
}
