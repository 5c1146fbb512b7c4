/** Host and port to dial for a canonical origin (brackets of an IPv6 literal removed, default ports filled). */
export function dialTarget(origin: string): { host: string; port: number } {
  const url = new URL(origin);
  const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port };
}
