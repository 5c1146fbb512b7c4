import { signedUrl, splitRequestTarget } from '../signing/canonical-url.js';
const ABSOLUTE = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)(.*)$/s;
/**
 * Canonicalises a full URL given on the command line or rebuilt from a capture. Unlike parseBaseAddress it
 * accepts http:// for any host (a vendor may inspect a plain-HTTP webhook) and keeps a path and query. The path
 * is taken from the raw text, not from WHATWG URL, which would re-encode characters and resolve "..": the spec
 * signs the path exactly as posted. The pieces are then joined by the sidecar's own signedUrl().
 */
export function canonicalFullUrl(raw) {
    const match = ABSOLUTE.exec(raw.trim());
    if (!match)
        throw new Error(`"${raw}" is not an absolute http:// or https:// URL`);
    const [, scheme = '', authority = '', rest = ''] = match;
    const protocol = `${scheme.toLowerCase()}:`;
    if (protocol !== 'http:' && protocol !== 'https:')
        throw new Error(`scheme ${scheme} is not http or https`);
    if (authority.includes('@'))
        throw new Error('the URL must not carry credentials');
    let origin;
    try {
        origin = new URL(`${protocol}//${authority}/`);
    }
    catch {
        throw new Error(`"${authority}" is not a valid host`);
    }
    const target = splitRequestTarget(rest.startsWith('/') ? rest : `/${rest}`);
    const base = {
        origin: `${origin.protocol}//${origin.host}`,
        pathPrefix: '',
        protocol,
        hostname: origin.hostname,
        isLoopback: false,
    };
    return { url: signedUrl(base, target), protocol, rawAuthority: authority, path: target.path, query: target.query };
}
