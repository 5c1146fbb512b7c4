import { BlockList, isIP } from 'node:net';

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/**
 * 127.0.0.0/8, ::1 (also IPv4-mapped) and the name localhost: where plain http:// to the gateway is accepted, and
 * the only hosts the egress listener listens on by default. An address as written in a listener setting: no URL brackets.
 */
export function isLoopbackHost(host: string): boolean {
  if (host.toLowerCase() === 'localhost') return true;
  const family = isIP(host);
  return family !== 0 && LOOPBACK.check(host, family === 6 ? 'ipv6' : 'ipv4');
}
