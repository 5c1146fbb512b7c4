// Source-address checks. A BlockList gives exact addresses and CIDR ranges for free and compares IPv4 and
// IPv6 correctly, which string comparison does not (e.g. "::ffff:127.0.0.1" is 127.0.0.1).
import { BlockList, isIP } from 'node:net';

export interface IpAllowList {
  allows(address: string | undefined): boolean;
}

/** Strip the IPv4-mapped prefix that dual-stack sockets report, so IPv4 entries match. */
export function normalizeAddress(address: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  return mapped?.[1] ?? address;
}

/** Throws on an entry that is neither an IP address nor a CIDR range, naming the entry. */
export function createAllowList(entries: readonly string[]): IpAllowList {
  const list = new BlockList();
  for (const entry of entries) addEntry(list, entry);
  return {
    allows(address) {
      if (address === undefined) return false;
      const ip = normalizeAddress(address);
      const family = isIP(ip);
      if (family === 0) return false;
      return list.check(ip, family === 4 ? 'ipv4' : 'ipv6');
    },
  };
}

function addEntry(list: BlockList, entry: string): void {
  const [addr = '', prefix, extra] = entry.trim().split('/');
  const family = isIP(addr);
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (family === 0 || extra !== undefined) throw new Error(`"${entry}" is not an IP address or CIDR range`);
  if (prefix === undefined) {
    list.addAddress(addr, type);
    return;
  }
  const bits = Number(prefix);
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(prefix) || bits > max) throw new Error(`"${entry}" has an invalid prefix length`);
  list.addSubnet(addr, bits, type);
}

const LOOPBACK = createAllowList(['127.0.0.0/8', '::1']);

/** The control API is a test backdoor: it must only ever answer the machine it runs on. */
export function isLoopbackAddress(address: string | undefined): boolean {
  return LOOPBACK.allows(address);
}
