// Strict standard base64 (RFC 4648 section 4, with padding). Buffer.from(x, 'base64') silently accepts
// base64url, missing padding and stray characters; a strict gateway does not, so neither does the simulator.

const STANDARD_PADDED = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Decodes strict standard padded base64, or returns undefined. Empty input is refused. */
export function decodeStrictBase64(value: string): Buffer | undefined {
  if (value === '' || !STANDARD_PADDED.test(value)) return undefined;
  const bytes = Buffer.from(value, 'base64');
  // The round trip refuses non-zero padding bits ("QQ==" vs "QR=="): two strings must not decode to one payload.
  return bytes.toString('base64') === value ? bytes : undefined;
}

/** A short, human description of what is wrong, for refusal messages. */
export function describeBase64Problem(value: string): string {
  if (value === '') return 'it is empty';
  if (/[-_]/.test(value)) return 'it contains "-" or "_": that is base64url, the spec requires standard base64';
  if (/\s/.test(value)) return 'it contains whitespace or line breaks';
  if (value.length % 4 !== 0) return 'its length is not a multiple of 4: the "=" padding is missing';
  return 'it is not canonical standard base64 with padding';
}
