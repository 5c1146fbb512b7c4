import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import type { BaseAddress } from '../config/base-url.js';
import { trustedCas } from '../upstream/trusted-cas.js';
import type { CheckMark } from './check-report.js';
import { dialTarget } from './upstream-tls.js';

export interface ProbeResult {
  readonly mark: CheckMark;
  readonly detail: string;
}

// Certificate errors that a private gateway CA typically causes; the fix is the CA setting, so say so.
const CA_ERRORS = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
]);

function failure(err: NodeJS.ErrnoException, what: string): ProbeResult {
  const code = err.code ?? err.message;
  const hint = CA_ERRORS.has(code) ? ' (trust the gateway CA with SIDECAR_UPSTREAM_CA_FILE)' : '';
  return { mark: '✘', detail: `${what} failed: ${code}${hint}` };
}

/**
 * Resolves once: on the first of connect, error or timeout, and always destroys the socket. A failure is named by
 * the phase it happened in: the host name lookup, the TCP connect, or (for TLS) the handshake once TCP is up, so
 * that a refused connection is not reported as a TLS problem.
 */
function connectResult<S extends Socket>(
  socket: S,
  timeoutMs: number,
  onConnect: (s: S) => ProbeResult,
  tls: boolean,
): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let tcpUp = false;
    const phase = (): string => (tls && tcpUp ? 'TLS handshake' : 'TCP connect');
    const done = (result: ProbeResult): void => {
      socket.destroy();
      resolve(result);
    };
    socket.once('connect', () => (tcpUp = true));
    socket.setTimeout(timeoutMs, () => done({ mark: '✘', detail: `${phase()} timed out after ${timeoutMs} ms` }));
    socket.once('error', (err: NodeJS.ErrnoException) =>
      done(failure(err, err.syscall === 'getaddrinfo' ? 'host name lookup' : phase())),
    );
    socket.once(tls ? 'secureConnect' : 'connect', () => done(onConnect(socket)));
  });
}

export function describeTls(socket: TLSSocket): ProbeResult {
  const cert = socket.getPeerCertificate();
  const subject = typeof cert.subject?.CN === 'string' ? cert.subject.CN : 'unknown subject';
  const issuer = typeof cert.issuer?.CN === 'string' ? cert.issuer.CN : 'unknown issuer';
  return {
    mark: '✔',
    detail: `TCP and TLS ok (${socket.getProtocol() ?? 'TLS'}, certificate "${subject}" issued by "${issuer}", valid until ${cert.valid_to})`,
  };
}

/** Opens one connection to the gateway: TCP, and the TLS handshake with certificate and host name checks. */
export function probeConnection(base: BaseAddress, ca: string | undefined, timeoutMs: number): Promise<ProbeResult> {
  const { host, port } = dialTarget(base.origin);
  if (base.protocol === 'http:') {
    const socket = netConnect({ host, port });
    return connectResult(
      socket,
      timeoutMs,
      () => ({ mark: '✔', detail: 'TCP ok; TLS not applicable (http:// loopback address, simulator or tests only)' }),
      false,
    );
  }
  const socket = tlsConnect({
    host,
    port,
    // SNI must be a host name; for an IP literal Node checks the certificate's IP SAN instead.
    servername: isIP(host) === 0 ? host : undefined,
    ca: trustedCas(ca),
    rejectUnauthorized: true,
  });
  return connectResult(socket, timeoutMs, describeTls, true);
}
