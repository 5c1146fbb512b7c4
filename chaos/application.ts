// The internal application behind the sidecars: it receives the forwarded postbacks, verifies each signature with
// the Standard Webhooks reference library as a real application would, and records what it accepted. The nemesis
// takes it down (connections refused) or makes it answer 500.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';

export type ApplicationMode = 'up' | 'down' | 'failing';

export interface ReceivedPostback {
  readonly transactionId: string;
  readonly status: string;
  readonly postbackId: string;
  readonly attempt: number;
  readonly verified: boolean;
}

export interface Application {
  readonly url: string;
  setMode(mode: ApplicationMode): Promise<void>;
  /** Called for each postback accepted (200), or refused for its signature (verified false). */
  onPostback(listener: (postback: ReceivedPostback) => void): void;
  close(): Promise<void>;
}

/** `host`: where it listens, the address the replicas forward to. */
export async function startApplication(forwardSecret: string, port: number, host = '127.0.0.1'): Promise<Application> {
  const webhook = new Webhook(forwardSecret);
  let mode: ApplicationMode = 'up';
  let listener: (postback: ReceivedPostback) => void = () => {};
  const handle = async (req: IncomingMessage): Promise<number> => {
    const body = await text(req);
    if (mode === 'failing') return 500;
    const headers = Object.fromEntries(
      Object.entries(req.headers).map(([name, value]) => [
        name,
        Array.isArray(value) ? value.join(',') : (value ?? ''),
      ]),
    );
    const payload = parsePayload(body);
    const postbackId = headers['webhook-id'] ?? '';
    const attempt = Number(headers['x-postback-attempt'] ?? 1);
    try {
      webhook.verify(body, headers);
    } catch {
      listener({ transactionId: payload.transactionId, status: payload.status, postbackId, attempt, verified: false });
      return 400;
    }
    listener({ transactionId: payload.transactionId, status: payload.status, postbackId, attempt, verified: true });
    return 200;
  };
  let server = await listen(host, port, handle);
  return {
    url: `http://${host}:${port}`,
    async setMode(next) {
      if (next === 'down' && mode !== 'down') await closeServer(server);
      if (next !== 'down' && mode === 'down') server = await listen(host, port, handle);
      mode = next;
    },
    onPostback(next) {
      listener = next;
    },
    close: () => (mode === 'down' ? Promise.resolve() : closeServer(server)),
  };
}

function listen(host: string, port: number, handle: (req: IncomingMessage) => Promise<number>): Promise<Server> {
  const server = createServer((req, res) => {
    handle(req).then(
      (status) => res.writeHead(status, { 'content-type': 'application/json' }).end('{}'),
      () => res.writeHead(500).end(),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

function text(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parsePayload(body: string): { transactionId: string; status: string } {
  try {
    const value = JSON.parse(body) as { transaction_id?: unknown; status?: unknown };
    const text = (field: unknown): string => (typeof field === 'string' ? field : '');
    return { transactionId: text(value.transaction_id), status: text(value.status) };
  } catch {
    return { transactionId: '', status: '' };
  }
}
