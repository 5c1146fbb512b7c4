// Who may have a request signed. The egress listener has no authentication: it trusts where it listens (loopback
// by default, so only this host's processes reach it). A web browser on this host breaks that trust in two ways,
// both refused here, on the request's headers alone, before its body is read:
// - DNS rebinding: a page the developer visits points its own name at 127.0.0.1 and then posts JSON to the sidecar
//   as a same-origin request, no preflight asked. Its requests still carry the page's name in Host.
// - Any request a browser makes on a page's behalf: browsers add Origin (every cross-origin request, and POSTs
//   even same-origin) and Sec-Fetch-Site (to loopback and https addresses). No internal service sends Origin, and
//   one that sends Sec-Fetch-Site sends `none`: a request no page initiated.
// Sec-Fetch-Mode is not read: Node's fetch() sends `Sec-Fetch-Mode: cors` on every request, so it would refuse
// the internal services themselves, and a browser never sends it without Sec-Fetch-Site beside it.
import type { IncomingHttpHeaders } from 'node:http';
import { isIP } from 'node:net';
import { isLoopbackHost } from '../config/loopback.js';
import { sidecarErrors, type SidecarError } from '../errors.js';

export interface CallerRule {
  /** SIDECAR_LISTEN_HOST: on loopback, only loopback names are expected in Host. */
  readonly listenHost: string;
  /** SIDECAR_LISTEN_ALLOWED_HOSTS: lowercase, IPv6 addresses without brackets. */
  readonly allowedHosts: readonly string[];
}

/** The check of one request's headers: the refusal, or undefined when the request may go on. */
export type CallerCheck = (headers: IncomingHttpHeaders) => SidecarError | undefined;

/**
 * Accepted in Host, port aside: `localhost`, a loopback address (127.0.0.0/8, [::1]) and the names of
 * SIDECAR_LISTEN_ALLOWED_HOSTS. A listener outside loopback (SIDECAR_LISTEN_ALLOW_NON_LOOPBACK) is reached at
 * addresses of the network too (the pod's, a Service's cluster IP), so any IP address is accepted there, and the
 * listen host itself when it is a name. Either is safe from rebinding: a page can only rebind a name it owns, and a
 * page whose URL holds an address was served from that address. No Host at all (HTTP/1.0) is no browser's.
 */
export function createCallerCheck(rule: CallerRule): CallerCheck {
  const onLoopback = isLoopbackHost(rule.listenHost);
  const names = new Set(rule.allowedHosts);
  if (!onLoopback && isIP(rule.listenHost) === 0) names.add(rule.listenHost.toLowerCase());
  const acceptedHostname = (hostname: string): boolean => {
    if (hostname === 'localhost' || names.has(hostname)) return true;
    const family = isIP(hostname);
    if (family === 0) return false;
    return !onLoopback || isLoopbackAddress(hostname, family);
  };
  return (headers) => {
    const { host } = headers;
    if (host !== undefined) {
      const hostname = hostnameOf(host);
      if (hostname === undefined || !acceptedHostname(hostname)) return sidecarErrors.forbiddenHost();
    }
    if (headers.origin !== undefined) return sidecarErrors.browserOrigin();
    const site = headers['sec-fetch-site'];
    if (site !== undefined && site !== 'none') return sidecarErrors.browserOrigin();
    return undefined;
  };
}

/**
 * isLoopbackHost's answer for an IP address, without its BlockList (about 2 µs a call, on every request) for the
 * usual spellings: isIP() accepts only dotted decimal without leading zeros, so 127.0.0.0/8 is the prefix `127.`.
 */
function isLoopbackAddress(address: string, family: number): boolean {
  if (family === 4) return address.startsWith('127.');
  return address === '::1' || isLoopbackHost(address);
}

const PORT = /^:\d*$/;

/**
 * Host's name or address, lowercase, without port or brackets (RFC 9110 7.2: uri-host [":" port]); undefined for
 * a value that is not of that form. Strict on purpose: a browser sends the URL's host as it serialises it.
 */
function hostnameOf(host: string): string | undefined {
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    if (end === -1 || !PORT.test(host.slice(end + 1) || ':')) return undefined;
    const address = host.slice(1, end);
    return isIP(address) === 6 ? address.toLowerCase() : undefined;
  }
  const colon = host.indexOf(':');
  if (colon === -1) return host.toLowerCase();
  return PORT.test(host.slice(colon)) ? host.slice(0, colon).toLowerCase() : undefined;
}
