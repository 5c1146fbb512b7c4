import { splitRequestTarget, type RequestTarget } from '../signing/canonical-url.js';

export type RouteMatch =
  | { readonly kind: 'signed'; readonly route: string; readonly target: RequestTarget }
  | { readonly kind: 'not_found' }
  | { readonly kind: 'method_not_allowed'; readonly route: string };

/** Label used in metrics and logs for requests that matched no route (keeps label cardinality bounded). */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * Routes on the path alone. An absolute-form request line ("POST http://elsewhere/path") is reduced to its
 * path and the Host header is never read: the destination is always the configured base address, so the
 * sidecar can never be used as an open proxy.
 */
export function createRouter(signedRoutes: readonly string[]): (method: string, requestTarget: string) => RouteMatch {
  const routes = new Set(signedRoutes);
  return (method, requestTarget) => {
    const target = splitRequestTarget(originForm(requestTarget));
    if (!routes.has(target.path)) return { kind: 'not_found' };
    if (method !== 'POST') return { kind: 'method_not_allowed', route: target.path };
    return { kind: 'signed', route: target.path, target };
  };
}

function originForm(requestTarget: string): string {
  if (requestTarget.startsWith('/')) return requestTarget;
  const scheme = requestTarget.indexOf('://');
  if (scheme === -1) return '/'; // asterisk-form or garbage: matches no route
  const pathStart = requestTarget.slice(scheme + 3).search(/[/?#]/);
  if (pathStart === -1) return '/';
  const rest = requestTarget.slice(scheme + 3 + pathStart);
  return rest.startsWith('/') ? rest : `/${rest}`;
}
