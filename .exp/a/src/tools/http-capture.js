// The capture format of `verify`: what a vendor has at hand when a signature fails. Two forms are accepted:
//  1. raw HTTP/1.1 text: request line, headers, blank line, body (a webhook log, `nc -l`, a tcpdump follow);
//  2. JSON: {"method": "POST", "url": "https://...", "headers": {"X-Nonce": "..."}, "body": "..." or {...}}.
export function parseCapture(text) {
    const trimmed = text.replace(/^\uFEFF/, '').trimStart();
    if (trimmed === '')
        throw new Error('the captured request is empty');
    return trimmed.startsWith('{') ? parseJsonCapture(trimmed) : parseRawCapture(trimmed);
}
function parseRawCapture(text) {
    const split = /\r?\n\r?\n/.exec(text);
    const head = split ? text.slice(0, split.index) : text;
    const body = split ? text.slice(split.index + split[0].length) : '';
    const [requestLine = '', ...headerLines] = head.split(/\r?\n/);
    const parts = requestLine.trim().split(/\s+/);
    if (parts.length < 2 || !/^[A-Za-z]+$/.test(parts[0] ?? '')) {
        throw new Error(`first line "${requestLine}" is not an HTTP request line (METHOD TARGET HTTP/1.1)`);
    }
    const headers = new Map();
    for (const line of headerLines) {
        const colon = line.indexOf(':');
        if (colon <= 0)
            throw new Error(`header line "${line}" has no "name: value"`);
        headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    return { method: parts[0] ?? '', target: parts[1], url: undefined, headers, body };
}
function parseJsonCapture(text) {
    let value;
    try {
        value = JSON.parse(text);
    }
    catch {
        throw new Error('the capture starts with "{" but is not valid JSON ({"method","url","headers","body"})');
    }
    if (typeof value !== 'object' || value === null)
        throw new Error('the JSON capture must be an object');
    const record = value;
    const headers = new Map();
    const rawHeaders = record.headers;
    if (typeof rawHeaders === 'object' && rawHeaders !== null) {
        for (const [name, v] of Object.entries(rawHeaders)) {
            if (typeof v === 'string')
                headers.set(name.toLowerCase(), v);
        }
    }
    const body = record.body;
    return {
        method: typeof record.method === 'string' ? record.method : 'POST',
        target: undefined,
        url: typeof record.url === 'string' ? record.url : undefined,
        headers,
        // A body given as a JSON object is re-serialised: `data` is unchanged, which is all the signature covers.
        body: typeof body === 'string' ? body : JSON.stringify(body ?? ''),
    };
}
/** The full URL the request was posted to: --url wins, then an absolute target or JSON url, then Host + target. */
export function captureUrl(capture, url, scheme) {
    if (url !== undefined)
        return url;
    if (capture.url !== undefined)
        return capture.url;
    const target = capture.target ?? '';
    if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(target))
        return target;
    const host = capture.headers.get('host');
    if (host === undefined || host === '') {
        throw new Error('the capture has no Host header; pass the full URL with --url');
    }
    return `${scheme}://${host}${target}`;
}
