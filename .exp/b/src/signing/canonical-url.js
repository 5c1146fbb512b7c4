/**
 * Splits a request target ("/p?q#f") into path and query. The fragment is dropped: it is never sent
 * and never signed (spec 5.2). An empty query ("/p?") becomes "" so that neither "?" is sent nor signed.
 */
export function splitRequestTarget(target) {
    const withoutFragment = target.split('#', 1)[0] ?? '';
    const q = withoutFragment.indexOf('?');
    if (q === -1)
        return { path: withoutFragment, query: '' };
    return { path: withoutFragment.slice(0, q), query: withoutFragment.slice(q + 1) };
}
/** Path and query as they go on the request line: base path prefix + posted path, "?query" only if non-empty. */
export function upstreamPath(base, target) {
    const query = target.query === '' ? '' : `?${target.query}`;
    return `${base.pathPrefix}${target.path}${query}`;
}
/**
 * The FULL_URL part of the signing string. The origin was canonicalised once when the base address was
 * parsed (lowercase scheme and host, default port omitted), and the path comes from upstreamPath(), the same
 * function that builds the request line: the signed URL and the posted URL cannot differ.
 */
export function signedUrl(base, target) {
    return `${base.origin}${upstreamPath(base, target)}`;
}
