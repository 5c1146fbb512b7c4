// The Service in front of the replicas' postback receivers, which the gateway's webhook URL names: each new TCP
// connection goes to the next replica in service, as kube-proxy spreads connections over ready pods. A connection
// whose replica dies is cut, and the gateway retries the postback.
import { createConnection, createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface BalancerTarget {
  readonly host: string;
  readonly port: number;
}

export interface Balancer {
  readonly url: string;
  setTargets(targets: readonly BalancerTarget[]): void;
  close(): Promise<void>;
}

/** `host`: where it listens (the address the gateway's webhook URL names). */
export async function startBalancer(host = '127.0.0.1'): Promise<Balancer> {
  let targets: readonly BalancerTarget[] = [];
  let turn = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const target = targets[turn++ % Math.max(1, targets.length)];
    if (target === undefined) {
      client.destroy();
      return;
    }
    const upstream = createConnection(target);
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
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host}:${port}`,
    setTargets(next) {
      targets = [...next];
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
