import type { PostbackPublicUrl } from '../config/postback-settings.js';
import { signedUrl } from '../signing/canonical-url.js';

/**
 * FULL_URL of the registered webhook URL by the URL rules of spec 5.2, built by the same function as the egress
 * side's signed URL: lowercase scheme and host, no default port, path exactly as registered, no empty "?".
 */
export function signedPostbackUrl(url: PostbackPublicUrl): string {
  const base = {
    origin: url.origin,
    pathPrefix: '',
    protocol: url.protocol,
    hostname: url.hostname,
    isLoopback: false,
  };
  return signedUrl(base, { path: url.path, query: url.query });
}
