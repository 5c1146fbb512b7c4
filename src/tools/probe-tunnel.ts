import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { buildConnector } from 'undici';
import type { BaseAddress } from '../config/base-url.js';
import type { UpstreamProxyConfig } from '../config/proxy-settings.js';
import { envVarOf } from '../config/schema.js';
import { trustedCas } from '../upstream/trusted-cas.js';
import { errorCode, proxyStatus } from '../upstream/upstream-errors.js';
import { forwardProxyConnector } from '../upstream/forward-proxy-tunnel.js';
import { describeTls, type ProbeResult } from './probe-connection.js';

export interface TunnelProbe {
  /** The forward proxy hop: reached, and did it open the tunnel. */
  readonly proxy: ProbeResult;
  /** The gateway through the tunnel (TLS, certificate and name); undefined when no tunnel was opened. */
  readonly gateway: ProbeResult | undefined;
}

/**
 * Opens one tunnel exactly as `serve` does (forward-proxy-tunnel.ts, the same connector and trust) and says which hop
 * failed: the forward proxy (unreachable, or its answer to the CONNECT: 407, 403, 502...) or the gateway through it.
 */
export function probeTunnel(
  base: BaseAddress,
  proxy: UpstreamProxyConfig,
  ca: string | undefined,
  timeoutMs: number,
): Promise<TunnelProbe> {
  const cas = trustedCas(ca);
  const gatewayConnect = buildConnector({ timeout: timeoutMs, ...(cas === undefined ? {} : { ca: cas }) });
  const connect = forwardProxyConnector(() => proxy, gatewayConnect, timeoutMs);
  const url = new URL(base.origin);
  const target = `${url.hostname}:${url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : url.port}`;
  const via = `CONNECT ${target} via ${proxy.origin}`;
  return new Promise((resolve) => {
    connect(
      { hostname: url.hostname, host: url.host, protocol: url.protocol, port: url.port },
      (error: Error | null, socket: Socket | null) => {
        if (error === null && socket !== null) {
          const gateway =
            socket instanceof TLSSocket
              ? describeTls(socket)
              : { mark: '✔' as const, detail: 'TCP ok through the tunnel; TLS not applicable (http:// loopback)' };
          socket.destroy();
          resolve({ proxy: { mark: '✔', detail: `${via}: tunnel open` }, gateway });
          return;
        }
        resolve(describeFailure(error, via));
      },
    );
  });
}

function describeFailure(error: Error | null, via: string): TunnelProbe {
  const code = errorCode(error) ?? 'unknown';
  const status = proxyStatus(error);
  if (status !== undefined) {
    return {
      proxy: { mark: '✘', detail: `${via}: the forward proxy refused it, ${status}${refusalHint(status)}` },
      gateway: undefined,
    };
  }
  if (code.startsWith('ERR_PROXY_') && code !== 'ERR_PROXY_TUNNEL_CLOSED') {
    return { proxy: { mark: '✘', detail: `${via}: ${code}, ${error?.message ?? ''}` }, gateway: undefined };
  }
  // The forward proxy opened the tunnel: what failed is the gateway's TLS through it.
  const hint =
    code.startsWith('ERR_TLS_') || /CERT|SELF_SIGNED|UNABLE_TO/.test(code)
      ? ` (trust the gateway CA with ${envVarOf('upstream.caFile') ?? 'SIDECAR_UPSTREAM_CA_FILE'})`
      : '';
  return {
    proxy: { mark: '✔', detail: `${via}: tunnel open` },
    gateway: { mark: '✘', detail: `TLS handshake through the tunnel failed: ${code}${hint}` },
  };
}

function refusalHint(status: number): string {
  if (status === 407) {
    return ` authentication required (check ${envVarOf('upstream.proxy.username')} and ${envVarOf('upstream.proxy.passwordFile')})`;
  }
  if (status === 403) return " forbidden (the forward proxy's rules do not allow CONNECT to this host and port)";
  if (status >= 500) return ' (the forward proxy could not reach the gateway: its DNS, route or the gateway itself)';
  return '';
}
