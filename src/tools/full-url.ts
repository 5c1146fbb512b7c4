import type { BaseAddress } from '../config/base-url.js';
import { signedUrl, splitRequestTarget } from '../signing/canonical-url.js';

/** A full URL canonicalised by the rules of spec 5.2, with the pieces the verify diagnostics vary. */
export interface CanonicalUrl {
  /** FULL_URL as signed: lowercase scheme and host, default port dropped, path and query exactly as given. */
  readonly url: string;
  readonly protocol: 'http:' | 'https:';
  /** Host as written in the input (case kept), with its port if one was written. */
  readonly rawAuthority: string;
  readonly path: string;
  /** Query without "?"; "" when absent or empty. */
  readonly query: string;
}

const ABSOLUTE = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)(.*)$/s;

/**
 * Canonicalises a full URL given on the command line or rebuilt from a capture. Unlike parseBaseAddress it
 * accepts http:// for any host (a vendor may inspect a plain-HTTP webhook) and keeps a path and query. The path
 * is taken from the raw text, not from WHATWG URL, which would re-encode characters and resolve "..": the spec
 * signs the path exactly as posted. The pieces are then joined by the sidecar's own signedUrl().
 */
export function canonicalFullUrl(raw: string): CanonicalUrl {
  const match = ABSOLUTE.exec(raw.trim());
  if (!match) throw new Error(`"${raw}" is not an absolute http:// or https:// URL`);
  const [, scheme = '', authority = '', rest = ''] = match;
  const protocol = `${scheme.toLowerCase()}:`;
  if (protocol !== 'http:' && protocol !== 'https:') throw new Error(`scheme ${scheme} is not http or https`);
  if (authority.includes('@')) throw new Error('the URL must not carry credentials');
  let origin: URL;
  try {
    origin = new URL(`${protocol}//${authority}/`);
  } catch {
    throw new Error(`"${authority}" is not a valid host`);
  }
  const target = splitRequestTarget(rest.startsWith('/') ? rest : `/${rest}`);
  const base: BaseAddress = {
    origin: `${origin.protocol}//${origin.host}`,
    pathPrefix: '',
    protocol,
    hostname: origin.hostname,
    isLoopback: false,
  };
  return { url: signedUrl(base, target), protocol, rawAuthority: authority, path: target.path, query: target.query };
}
