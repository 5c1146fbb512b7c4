import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { ConfigError } from '../errors.js';
import type { ConfigWarning } from './config-warning.js';
import { isLoopbackHost } from './loopback.js';
import { settingName } from './schema.js';

export type HostKey = 'listen.host' | 'admin.host';

/**
 * The sidecar signs whatever reaches its egress listener, without authentication: outside loopback that is everything on the pod
 * network. Refused unless SIDECAR_LISTEN_ALLOW_NON_LOOPBACK says so; then a warning for the start log.
 */
export function checkListenHost(host: string, allowNonLoopback: boolean): ConfigWarning | undefined {
  const setting = settingName('listen.host');
  if (host === '') throw new ConfigError(setting, 'is empty, which listens on every interface; give an address');
  if (isLoopbackHost(host)) return undefined;
  const allow = settingName('listen.allowNonLoopback');
  if (!allowNonLoopback) {
    throw new ConfigError(
      setting,
      `"${host}" is not loopback (127.0.0.0/8, ::1, localhost): anything that reaches it could have payments ` +
        `signed, with no authentication; set ${allow} to true to allow it`,
    );
  }
  return {
    setting,
    message:
      `"${host}" is not loopback (allowed by ${allow}): anything that reaches it can have payments signed ` +
      'as this account, with no authentication; limit who reaches it (NetworkPolicy)',
  };
}

/** A DNS name as it appears in a Host header: labels of letters, digits, `-` and `_`, no port, no wildcard. */
const HOST_NAME = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/;

/**
 * SIDECAR_LISTEN_ALLOWED_HOSTS as the egress listener compares them with Host (egress/caller-check.ts): lowercase,
 * an IPv6 address without its brackets. Exact names only: a wildcard would let in names nobody meant to allow.
 */
export function allowedHostNames(raw: readonly string[]): readonly string[] {
  const names = raw.map((name) => name.toLowerCase().replace(/^\[(.*)\]$/, '$1'));
  const bad = raw.filter((_, i) => {
    const name = names[i] ?? '';
    return isIP(name) === 0 && !HOST_NAME.test(name);
  });
  if (bad.length > 0) {
    const quoted = bad.map((name) => JSON.stringify(name)).join(', ');
    throw new ConfigError(
      settingName('listen.allowedHosts'),
      `${quoted}: each must be a host name or an IP address, without port, scheme or wildcard`,
    );
  }
  return names;
}

/** The hosts the listeners would fail to resolve, as errors naming their setting: found at start, not at listen. */
export async function unresolvableHosts(
  hosts: ReadonlyArray<{ readonly key: HostKey; readonly host: string }>,
): Promise<ConfigError[]> {
  const failures = await Promise.all(
    hosts.map(async ({ key, host }) => {
      try {
        await lookup(host);
        return [];
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'error';
        return [new ConfigError(settingName(key), `cannot resolve "${host}" (${code})`)];
      }
    }),
  );
  return failures.flat();
}
