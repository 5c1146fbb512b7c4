// The base address is parsed once, here, and both the signer and the forwarder use the result, so the URL
// that is signed and the URL that is posted cannot drift apart (spec 5.2: "one configuration value").
const LOOPBACK_NAMES = new Set(['localhost', '[::1]']);
function isLoopbackHost(hostname) {
    return LOOPBACK_NAMES.has(hostname) || /^127(\.\d{1,3}){3}$/.test(hostname);
}
/** Throws an Error whose message says what is wrong with the value, in words an operator can act on. */
export function parseBaseAddress(raw) {
    let url;
    try {
        url = new URL(raw);
    }
    catch {
        throw new Error(`"${raw}" is not an absolute URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
        throw new Error(`scheme ${url.protocol} is not supported; use https://`);
    }
    if (url.search !== '' || raw.includes('?'))
        throw new Error('must not carry a query string');
    if (url.hash !== '' || raw.includes('#'))
        throw new Error('must not carry a fragment');
    if (url.username !== '' || url.password !== '')
        throw new Error('must not carry credentials');
    const isLoopback = isLoopbackHost(url.hostname);
    if (url.protocol === 'http:' && !isLoopback) {
        throw new Error('http:// is allowed only for loopback hosts (simulator, tests); use https://');
    }
    // WHATWG URL already lowercases scheme and host and drops the scheme's default port.
    return {
        origin: `${url.protocol}//${url.host}`,
        pathPrefix: url.pathname.replace(/\/+$/, ''),
        protocol: url.protocol,
        hostname: url.hostname,
        isLoopback,
    };
}
