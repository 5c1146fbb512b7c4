// The base address is parsed once, here, and both the signer and the gateway client use the result, so the URL
// that is signed and the URL that is posted cannot drift apart (spec 5.2: "one configuration value").
import { isLoopbackHost } from './loopback.js';

export interface BaseAddress {
  /** Canonical origin for the signed URL: lowercase scheme and host, default port omitted. */
  readonly origin: string;
  /** Path prefix without a trailing slash ("" or e.g. "/gw"). */
  readonly pathPrefix: string;
  readonly protocol: 'http:' | 'https:';
  readonly hostname: string;
  readonly isLoopback: boolean;
}

/** Throws an Error whose message says what is wrong with the value, in words an operator can act on. */
export function parseBaseAddress(raw: string): BaseAddress {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`"${raw}" is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`scheme ${url.protocol} is not supported; use https://`);
  }
  if (url.search !== '' || raw.includes('?')) throw new Error('must not carry a query string');
  if (url.hash !== '' || raw.includes('#')) throw new Error('must not carry a fragment');
  if (url.username !== '' || url.password !== '') throw new Error('must not carry credentials');
  // URLs write IPv6 addresses in brackets ([::1]).
  const isLoopback = isLoopbackHost(url.hostname.replace(/^\[(.*)\]$/, '$1'));
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
