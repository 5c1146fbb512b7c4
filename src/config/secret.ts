import { inspect } from 'node:util';

const REDACTED = '[redacted]';

/**
 * Wraps a secret so that logging, JSON.stringify or util.inspect of any object holding it shows "[redacted]".
 * The value is reachable only through reveal(), which makes every use greppable.
 */
export class Secret {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
  }

  reveal(): string {
    return this.#value;
  }

  toJSON(): string {
    return REDACTED;
  }

  toString(): string {
    return REDACTED;
  }

  [inspect.custom](): string {
    return REDACTED;
  }
}
