/**
 * A tiny CONNECT proxy (node:net) that can cut a tunnel right after a request went into it, which no real proxy
 * can be told to do. It reads TLS record headers on the way to the gateway (never their content) to know when the
 * client's handshake is over: after the client's ChangeCipherSpec, its next record is its Finished; every
 * application-data record after that carries the request. Without a ChangeCipherSpec (TLS 1.3 without the
 * compatibility mode), the first application-data record is the Finished.
 *
 *   const proxy = await new CuttingProxy().start();
 *   proxy.url              // 'http://127.0.0.1:<port>'
 *   proxy.cutNextRequest() // the next request written into any tunnel reaches the gateway in full, then the
 *                          // tunnel closes on the client before any answer byte comes back
 *   proxy.connects         // 'host:port' of every CONNECT
 *   await proxy.stop();
 */
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

const HEAD_END = '\r\n\r\n';
const RECORD_HEADER = 5;
const CHANGE_CIPHER_SPEC = 20;
const APPLICATION_DATA = 23;

export class CuttingProxy {
  readonly connects: string[] = [];
  /** Requests cut so far. */
  cuts = 0;
  private armed = false;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private port = 0;

  constructor() {
    this.server = createServer((client) => this.accept(client));
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<this> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  cutNextRequest(): void {
    this.armed = true;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private track(socket: Socket): Socket {
    this.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => this.sockets.delete(socket));
    return socket;
  }

  private accept(client: Socket): void {
    this.track(client);
    let head = '';
    const onHead = (chunk: Buffer): void => {
      head += chunk.toString('latin1');
      const end = head.indexOf(HEAD_END);
      if (end === -1) return;
      client.off('data', onHead);
      client.pause();
      const target = /^CONNECT (\S+) HTTP\/1\.[01]\r\n/.exec(head)?.[1];
      if (target === undefined) {
        client.end('HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      this.connects.push(target);
      const rest = Buffer.from(head.slice(end + HEAD_END.length), 'latin1');
      this.tunnel(client, target, rest);
    };
    client.on('data', onHead);
  }

  private tunnel(client: Socket, target: string, early: Buffer): void {
    const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
    const upstream = this.track(connect({ host: host.replace(/^\[|\]$/g, ''), port }));
    upstream.once('error', () => client.destroy());
    upstream.once('connect', () => {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
      const records = new RecordWatch();
      let cutting = false;
      const toGateway = (chunk: Buffer): void => {
        upstream.write(chunk);
        if (records.feed(chunk) && this.armed && !cutting) {
          this.armed = false;
          cutting = true;
          this.cuts++;
          // The rest of the request (a body in its own record) still goes in; no answer byte comes back.
          setTimeout(() => client.destroy(), 100);
        }
      };
      if (early.length > 0) toGateway(early);
      client.on('data', toGateway);
      upstream.on('data', (chunk: Buffer) => {
        if (!cutting) client.write(chunk);
      });
      client.once('close', () => (cutting ? setTimeout(() => upstream.destroy(), 1_000) : upstream.destroy()));
      upstream.once('close', () => client.destroy());
      client.resume();
    });
  }
}

/** Follows the client's TLS records; feed() is true when a chunk carried application data after the handshake. */
class RecordWatch {
  private state: 'hello' | 'ccs' | 'done' = 'hello';
  /** Bytes of the current record still to come, or -1 while its header is being read. */
  private remaining = -1;
  private header: number[] = [];

  feed(chunk: Buffer): boolean {
    let application = false;
    let at = 0;
    while (at < chunk.length) {
      if (this.remaining <= 0) {
        this.header.push(chunk[at]!);
        at++;
        if (this.header.length < RECORD_HEADER) continue;
        const [type, , , high, low] = this.header as [number, number, number, number, number];
        this.header = [];
        this.remaining = (high << 8) | low;
        application = this.record(type) || application;
        continue;
      }
      const take = Math.min(this.remaining, chunk.length - at);
      this.remaining -= take;
      at += take;
    }
    return application;
  }

  private record(type: number): boolean {
    if (this.state === 'hello') {
      if (type === CHANGE_CIPHER_SPEC) this.state = 'ccs';
      else if (type === APPLICATION_DATA) this.state = 'done';
      return false;
    }
    if (this.state === 'ccs') {
      this.state = 'done';
      return false;
    }
    return type === APPLICATION_DATA;
  }
}
