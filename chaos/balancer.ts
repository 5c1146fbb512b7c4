// The Service in front of the replicas' postback receivers, which the gateway's webhook URL names: each new TCP
// connection goes to the next replica in service, as kube-proxy spreads connections over ready pods. A connection
// whose replica dies is cut, and the gateway retries the postback.
import { createConnection, createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface Balancer {
  readonly url: string;
  setTargets(ports: readonly number[]): void;
  close(): Promise<void>;
}

export async function startBalancer(): Promise<Balancer> {
  let targets: readonly number[] = [];
  let turn = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const port = targets[turn++ % Math.max(1, targets.length)];
    if (port === undefined) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: '127.0.0.1', port });
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    }
    client.pipe(upstream).pipe(client);
    client.once('error', () => upstream.destroy());
    upstream.once('error', () => client.destroy());
    client.once('close', () => upstream.destroy());
    upstream.once('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    setTargets(ports) {
      targets = [...ports];
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
