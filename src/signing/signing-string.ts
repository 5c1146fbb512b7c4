/** The five parts of spec 5.2, each exactly as sent. */
export interface SigningParts {
  readonly method: string;
  readonly fullUrl: string;
  readonly timestamp: string;
  readonly nonce: string;
  readonly data: string;
}

/** `<METHOD>.<FULL_URL>.<X-Timestamp>.<X-Nonce>.<body.data>`: literal dots, no spaces, no newlines. */
export function signingString(parts: SigningParts): string {
  return `${parts.method.toUpperCase()}.${parts.fullUrl}.${parts.timestamp}.${parts.nonce}.${parts.data}`;
}

/** X-Timestamp: Unix time in whole seconds as decimal ASCII (not milliseconds, not ISO 8601). */
export function unixTimestamp(nowMs: number): string {
  return String(Math.floor(nowMs / 1000));
}
