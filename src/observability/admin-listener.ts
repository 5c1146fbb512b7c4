// The admin listener's limits (docs/security.md, "The admin listener"). It listens on 0.0.0.0:9464 so that the
// kubelet and Prometheus reach it, so any pod of the cluster can connect to it. Its answers are small and public
// (probes, metrics: no secret); what it must withstand is being held. With Node's defaults (no connection cap, 60 s
// for headers, 16 KiB of them), 9,000 connections each holding 15 KB of unfinished headers took the sidecar from 70
// to 257 MB, past the pod's 256 MiB limit, and the memory stayed after they closed: an OOM kill, and payments stop.
// docs/operations.md, "Admin listener", says what an attacker can still do.
import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * A probe or a scrape sends a few hundred bytes of headers at once and no body (GET), so 3 s for the whole request
 * cuts no real client: the kubelet gives up on a probe sooner (timeoutSeconds 2-3 in deploy/base/deployment.yaml).
 * The short deadline is what frees a slot held by a connection that never finishes its headers, within 3.5 s (the
 * deadline plus the checking interval). 8 KiB of headers is twenty times what the kubelet and Prometheus send; a
 * connection sending more is answered 431 and closed as soon as it passes the limit.
 */
export const ADMIN_LISTENER = {
  headersTimeout: 3_000,
  requestTimeout: 3_000,
  // Node's default, said here: an idle scrape connection is closed before Prometheus's next scrape reuses it.
  keepAliveTimeout: 5_000,
  // How often Node checks the two deadlines above (its default, 30 s, would let a stalled connection hold 33 s).
  connectionsCheckingInterval: 500,
  maxHeaderSize: 8 * 1024,
} as const satisfies ServerOptions;

/**
 * A connection with no byte moving either way for this long is destroyed: a client that asks for an answer and never
 * reads it (behind a small TCP window, the 150 KB of /metrics stall) holds no slot for good, for no request deadline
 * applies once the request is in. Node looks every this long, and takes a write begun since its last look for one
 * in progress: a stalled answer goes within twice this, 20 s. Prometheus gives up on a scrape after 10 s (its default
 * scrape_timeout), so no scrape still waited for is cut.
 */
export const ADMIN_IDLE_SOCKET_MS = 10_000;

/**
 * At most this many connections at once; past it Node closes new ones at once. The legitimate ones are a handful:
 * the kubelet's three probes (one connection each, none kept alive), one scrape per Prometheus replica, the odd
 * `kubectl port-forward`. 128 leaves room for them many times over, and bounds what held connections cost: 128
 * times 8 KiB of headers is 1 MiB.
 */
export const ADMIN_MAX_CONNECTIONS = 128;

/**
 * At most this many of them from one address: one pod (one address) cannot take the kubelet's slots (it probes
 * from its node's address) nor Prometheus's, whatever it does with its own. Filling the whole cap takes eight
 * addresses working together, and each slot they hold is freed within the deadlines above.
 */
export const ADMIN_MAX_CONNECTIONS_PER_SOURCE = 16;

/** Applies the connection caps and the idle deadline to the admin server (the request deadlines are its options). */
export function limitAdminConnections(server: Server): void {
  server.maxConnections = ADMIN_MAX_CONNECTIONS;
  // Without a 'timeout' listener on the server, Node destroys a socket that times out.
  server.setTimeout(ADMIN_IDLE_SOCKET_MS);
  const perSource = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const source = socket.remoteAddress ?? 'unknown';
    const open = (perSource.get(source) ?? 0) + 1;
    perSource.set(source, open);
    socket.once('close', () => {
      const left = (perSource.get(source) ?? 1) - 1;
      if (left === 0) perSource.delete(source);
      else perSource.set(source, left);
    });
    if (open > ADMIN_MAX_CONNECTIONS_PER_SOURCE) socket.destroy();
  });
}

/**
 * Returns the admin handler's gate: true to serve a request, false for one that arrived on a connection whose earlier
 * request is still unanswered (HTTP pipelining), whose connection it closes. Node parses every request in a chunk it
 * has read before it stops reading, and hands each to the handler: one write of a thousand pipelined `GET /metrics`
 * had the sidecar render the metrics a thousand times at once and die of a full heap. The kubelet and Prometheus
 * never pipeline (Go's HTTP client waits for each answer); the requests past the first are dropped unserved, and
 * the connection goes with them.
 */
export function oneRequestAtATime(): (req: IncomingMessage, res: ServerResponse) => boolean {
  const answering = new WeakSet<Socket>();
  return (req, res) => {
    const { socket } = req;
    if (socket.destroyed || answering.has(socket)) {
      socket.destroy();
      return false;
    }
    answering.add(socket);
    res.once('close', () => answering.delete(socket));
    return true;
  };
}
