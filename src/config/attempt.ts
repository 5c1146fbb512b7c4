import { ConfigError } from '../errors.js';

/**
 * Runs one check; a ConfigError it throws is recorded (so that every refusal is reported at once, not only the
 * first) and gives undefined. Any other error is a bug and goes on.
 */
export function attempt<T>(errors: ConfigError[], run: () => T): T | undefined {
  try {
    return run();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    errors.push(err);
    return undefined;
  }
}
