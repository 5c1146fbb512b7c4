/** The largest answer body read as JSON for a field or two: gateway answers are small, a stray one may not be. */
const MAX_JSON_BODY_BYTES = 64 * 1024;

/** A gateway body as a JSON object, or undefined when it is empty, too large, not JSON, or not an object. */
export function jsonObject(body: Buffer): Record<string, unknown> | undefined {
  if (body.length === 0 || body.length > MAX_JSON_BODY_BYTES) return undefined;
  try {
    const value: unknown = JSON.parse(body.toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
