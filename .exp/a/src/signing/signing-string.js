/** `<METHOD>.<FULL_URL>.<X-Timestamp>.<X-Nonce>.<body.data>`: literal dots, no spaces, no newlines. */
export function signingString(parts) {
    return `${parts.method.toUpperCase()}.${parts.fullUrl}.${parts.timestamp}.${parts.nonce}.${parts.data}`;
}
/** X-Timestamp: Unix time in whole seconds as decimal ASCII (not milliseconds, not ISO 8601). */
export function unixTimestamp(nowMs) {
    return String(Math.floor(nowMs / 1000));
}
