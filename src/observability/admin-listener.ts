// The admin listener's connection policy (docs/security.md, "The admin listener"). It listens on 0.0.0.0:9464 so
// that the kubelet and Prometheus reach it, so any pod of the cluster can connect to it. Its answers are small and
// public (probes, metrics: no secret); what it must withstand is being held or flooded. With Node's defaults (no
// connection cap, 60 s for headers, 16 KiB of them), 9,000 connections each holding 15 KB of unfinished headers took
// the sidecar from 70 to 257 MB, past the pod's 256 MiB limit; 128 connections each pipelining 64 KB of scrapes
// ran it out of heap. docs/operations.md, "Admin listener", says what an attacker can still do.
import type { ConnectionPolicy } from '../inbound/connection-policy.js';

export const ADMIN_CONNECTIONS: ConnectionPolicy = {
  /**
   * The legitimate connections are a handful: the kubelet's three probes (one connection each, none kept alive), one
   * scrape per Prometheus replica, the odd `kubectl port-forward`. 128 leaves room for them many times over, and
   * bounds what held connections cost: 128 times 8 KiB of headers is 1 MiB.
   */
  maxConnections: 128,
  /**
   * One pod (one address) cannot take the kubelet's slots (it probes from its node's address) nor Prometheus's,
   * whatever it does with its own. Filling the whole cap takes eight addresses working together, and each slot they
   * hold is freed within the deadlines below.
   */
  maxConnectionsPerSource: 16,
  /** Twenty times what the kubelet and Prometheus send; more is answered 431 and closed as soon as it passes. */
  maxHeaderBytes: 8 * 1024,
  /**
   * A probe or a scrape sends a few hundred bytes of headers at once and no body (GET), so 3 s for the whole request
   * cuts no real client: the kubelet gives up on a probe sooner (timeoutSeconds 2-3 in deploy/base/deployment.yaml).
   * The short deadline frees a slot held by a connection that never finishes its headers within 3.5 s.
   */
  headersTimeoutMs: 3_000,
  requestTimeoutMs: 3_000,
  // Node's default, said here: an idle scrape connection is closed before Prometheus's next scrape reuses it.
  keepAliveTimeoutMs: 5_000,
  /**
   * A client that asks for an answer and never reads it (behind a small TCP window, the 150 KB of /metrics stall)
   * holds no slot for good. Node looks every this long, and takes a write begun since its last look for one in
   * progress: a stalled answer goes within twice this, 20 s. Prometheus gives up on a scrape after 10 s (its default
   * scrape_timeout), so no scrape still waited for is cut.
   */
  idleTimeoutMs: 10_000,
  // How often Node checks the request deadlines (its default, 30 s, would let a stalled connection hold 33 s).
  checkIntervalMs: 500,
};
