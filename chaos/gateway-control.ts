// The run's calls to the gateway simulator's control API (its ledger, completing a transaction, faults, the clock, a
// password): from this process over loopback, the only clients that API answers, whether the simulator speaks
// plain HTTP (a loopback world) or HTTPS with its throwaway CA (a namespaces world: the replicas reach it outside
// loopback, where the sidecar insists on https://).
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

export interface ControlAnswer {
  readonly status: number;
  readonly text: string;
}

export interface GatewayControl {
  call(method: string, path: string, body?: unknown): Promise<ControlAnswer>;
  /** Its kept-alive connections closed. */
  close(): void;
}

const CONTROL_TIMEOUT_MS = 10_000;

/** `listenUrl`: the simulator's; `caPem`: the CA to trust when it is HTTPS. */
export function gatewayControl(listenUrl: string, caPem: string | undefined): GatewayControl {
  const url = new URL(listenUrl);
  const https = url.protocol === 'https:';
  const agent = https ? new HttpsAgent({ keepAlive: true, ca: caPem }) : new HttpAgent({ keepAlive: true });
  const request = https ? httpsRequest : httpRequest;
  const call: GatewayControl['call'] = (method, path, body) =>
    new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : JSON.stringify(body);
      const req = request(
        new URL(path, url),
        {
          method,
          agent,
          // On every call, with a body or none: the control API refuses a change without it (its guard against pages).
          headers: { 'content-type': 'application/json' },
          timeout: CONTROL_TIMEOUT_MS,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer in ${CONTROL_TIMEOUT_MS} ms`)));
      req.on('error', reject);
      req.end(payload);
    });
  return { call, close: () => agent.destroy() };
}
