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

/**
 * Text a gateway wrote (an error answer's `code` or `message`), with every secret the request carried replaced by
 * "[redacted]": a gateway that echoes its request must not put the password or a token into a log line, an error,
 * a span or check's output. Each secret is looked for as itself, escaped as inside JSON text (a body echoed whole)
 * and percent-encoded, longest form first. A gateway that re-encodes or cuts a secret otherwise defeats this: so
 * `serve` keeps only an answer's code, and the message is shown by `check` alone (docs/security.md).
 */
export function maskSecrets(text: string, carried: readonly Secret[]): string {
  let masked = text;
  for (const secret of carried) {
    const value = secret.reveal();
    if (value === '') continue;
    const forms = [...new Set([value, JSON.stringify(value).slice(1, -1), encodeURIComponent(value)])];
    for (const form of forms.sort((a, b) => b.length - a.length)) masked = masked.replaceAll(form, REDACTED);
  }
  return masked;
}
