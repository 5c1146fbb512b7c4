import { sidecarErrors } from '../errors.js';
const utf8 = new TextDecoder('utf-8', { fatal: true });
/**
 * Checks that the body is one JSON object and wraps the bytes as received. The bytes are not re-serialised:
 * whitespace, key order and number formats reach the gateway exactly as the internal service wrote them.
 */
export function wrapEnvelope(body) {
    let value;
    try {
        value = JSON.parse(utf8.decode(body));
    }
    catch {
        throw sidecarErrors.invalidJson();
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value))
        throw sidecarErrors.notObject();
    const data = body.toString('base64');
    // Base64 needs no JSON escaping, so the envelope is built directly.
    return { data, json: `{"data":"${data}"}` };
}
