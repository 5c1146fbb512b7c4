import type { Socket } from 'node:net';
import { buildConnector, Client } from 'undici';
import type { Secret } from '../config/secret.js';
import { isSuccessStatus } from './http-status.js';
import { trustedCas } from './trusted-cas.js';
import { errorCode, forwardProxyErrors, UpstreamError } from './upstream-errors.js';

/** The forward proxy as a connection needs it; read afresh at each CONNECT, so a rotated password is used next. */
export interface ForwardProxyRoute {
  /** `http://host:port` or `https://host:port`. */
  readonly origin: string;
  readonly username: string | undefined;
  readonly password: Secret | undefined;
  /** PEM of the extra CA trusted for an https:// forward proxy's own certificate. */
  readonly ca: string | undefined;
}

type Connector = buildConnector.connector;
type ConnectOptions = buildConnector.Options;

// TLS failures that name the certificate: the gateway presented one the sidecar does not trust (or another host's).
// They keep their own code and stay "not transient", exactly as without a forward proxy. Any other failure of the
// handshake through the tunnel is the tunnel closing under it.
const CERTIFICATE_CODE = /^(ERR_TLS_CERT|CERT_|UNABLE_TO_|SELF_SIGNED|DEPTH_ZERO|ERR_SSL_)/;

/**
 * A connector for undici's Client that reaches the gateway through a forward proxy: a CONNECT to the gateway's
 * host and port (one tunnel per connection), then TLS to the gateway inside the tunnel, checked against the
 * gateway's name with the gateway's trusted CAs (`gatewayConnect`). The forward proxy sees only the host and port;
 * the request, its signature and the bearer token travel inside the gateway's TLS.
 *
 * The building blocks are undici's own ProxyAgent's (Client#connect for the CONNECT, buildConnector's httpSocket
 * for TLS through it), without the ProxyAgent itself: the gateway client lends one Client per connection
 * (connection-lender.ts), which the ProxyAgent's Agent and Pool hide; the ProxyAgent turns every refusal into one
 * RequestAbortedError whose status is only in the message, and waits for the CONNECT answer without a deadline.
 * Here every failure before the tunnel carries the gateway's TLS is an UpstreamError with an ERR_PROXY_* code and
 * happens inside the connect step, before undici writes any byte of the request: "nothing sent", by construction.
 */
export function forwardProxyConnector(
  route: () => ForwardProxyRoute,
  gatewayConnect: Connector,
  timeoutMs: number,
): Connector {
  return (options, callback) => {
    const forwardProxy = route();
    let settled = false;
    let tunnel: Socket | undefined;
    const abort = new AbortController();
    const finish = (error: Error | null, socket: Socket | null): void => {
      if (settled) {
        socket?.destroy();
        return;
      }
      settled = true;
      clearTimeout(timer);
      if (error === null && socket !== null) callback(null, socket);
      else callback(error ?? forwardProxyErrors.unreachable('no tunnel'), null);
    };
    const timer = setTimeout(() => {
      const error = forwardProxyErrors.timeout(
        timeoutMs,
        tunnel === undefined ? 'the CONNECT answer' : 'the TLS handshake',
      );
      abort.abort(error);
      tunnel?.destroy();
      finish(error, null);
    }, timeoutMs);
    const client = new Client(forwardProxy.origin, {
      connect: buildConnector({ timeout: timeoutMs, ...caOption(forwardProxy.ca) }),
      // One CONNECT on this Client: its socket becomes the tunnel, and the Client is closed right after.
      pipelining: 1,
    });
    client
      .connect({
        path: authority(options),
        headers: connectHeaders(options, forwardProxy),
        signal: abort.signal,
      })
      .then(
        ({ statusCode, socket: upgraded }) => {
          // undici hands over the very net.Socket (or TLSSocket, to an https:// forward proxy) the CONNECT went out on.
          const socket = upgraded as Socket;
          void client.close().catch(() => undefined);
          if (!isSuccessStatus(statusCode)) {
            socket.on('error', () => undefined).destroy();
            finish(forwardProxyErrors.refused(statusCode), null);
            return;
          }
          if (settled) return void socket.destroy();
          tunnel = socket;
          if (options.protocol !== 'https:') return finish(null, socket);
          gatewayConnect({ ...options, httpSocket: socket }, (error, secured) => {
            if (error !== null) finish(throughTunnel(error), null);
            else finish(null, secured);
          });
        },
        (error: unknown) => {
          void client.destroy().catch(() => undefined);
          finish(beforeTunnel(error), null);
        },
      );
  };
}

/** The CONNECT request-target: the gateway's host and port (RFC 9110 9.3.6), the default port written out. */
function authority(options: ConnectOptions): string {
  const port = options.port === '' ? defaultPort(options.protocol) : options.port;
  return `${options.hostname}:${port}`;
}

function defaultPort(protocol: string): string {
  return protocol === 'https:' ? '443' : '80';
}

function connectHeaders(options: ConnectOptions, forwardProxy: ForwardProxyRoute): Record<string, string> {
  const headers: Record<string, string> = { host: authority(options) };
  if (forwardProxy.username !== undefined && forwardProxy.password !== undefined) {
    const credentials = Buffer.from(`${forwardProxy.username}:${forwardProxy.password.reveal()}`, 'utf8').toString(
      'base64',
    );
    headers['proxy-authorization'] = `Basic ${credentials}`;
  }
  return headers;
}

function caOption(ca: string | undefined): { ca?: string[] } {
  const cas = trustedCas(ca);
  return cas === undefined ? {} : { ca: cas };
}

/** No CONNECT answer: the forward proxy refused the TCP connection, its TLS failed, or it closed before answering. */
function beforeTunnel(error: unknown): Error {
  if (error instanceof UpstreamError) return error; // the deadline, from the abort
  return forwardProxyErrors.unreachable(errorCode(error) ?? 'no answer to CONNECT');
}

/** The tunnel was up: a certificate refusal is the gateway's, any other failure the tunnel closing under TLS. */
function throughTunnel(error: Error): Error {
  const code = errorCode(error);
  if (error instanceof UpstreamError || (code !== undefined && CERTIFICATE_CODE.test(code))) return error;
  return forwardProxyErrors.tunnelClosed(code ?? 'closed');
}
