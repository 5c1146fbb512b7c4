// A hostile neighbour's floods, as the reviews made them: connections that each write a chunk of pipelined
// requests, again and again, and connections that hold unfinished headers. Used by the memory tests and the fault
// campaign. Every loop stops by itself at its deadline; traffic stays on this host (loopback addresses, or a
// namespace network's bridge: netns.ts).
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** `request` repeated to fill `bytes`: one write of pipelined requests. */
export function pipelined(request: string, bytes = 64 * 1024): Buffer {
  return Buffer.from(request.repeat(Math.max(1, Math.floor(bytes / request.length))), 'latin1');
}

export interface FloodTarget {
  readonly host: string;
  readonly port: number;
  /** Local addresses the connections come from, in turn: other pods (127.0.0.x, or extra addresses on a bridge). */
  readonly sources: readonly string[];
}

export interface FloodReport {
  /** Connections opened. */
  connections: number;
  /** Of them, the ones the server closed before the flood's own timeout did. */
  closedByServer: number;
  /** Bytes the server answered, all connections together. */
  answeredBytes: number;
}

/** How long one flooding connection is kept when the server leaves it open. */
const CONNECTION_MS = 2_000;

/**
 * `connections` connections at a time, each writing `chunk` once and waiting for the server to close it (or
 * CONNECTION_MS), then a new one in its place, until `untilMs` (a Date.now() time).
 */
export async function pipelinedFlood(
  target: FloodTarget,
  connections: number,
  chunk: Buffer,
  untilMs: number,
): Promise<FloodReport> {
  const report: FloodReport = { connections: 0, closedByServer: 0, answeredBytes: 0 };
  const lane = async (index: number) => {
    while (Date.now() < untilMs) {
      const localAddress = target.sources[(index + report.connections) % target.sources.length];
      report.connections += 1;
      await new Promise<void>((resolve) => {
        const socket = connect({ host: target.host, port: target.port, localAddress });
        let timedOut = false;
        const timer = setTimeout(() => {
          timedOut = true;
          socket.destroy();
        }, CONNECTION_MS);
        socket.on('error', () => undefined);
        socket.on('data', (data: Buffer) => (report.answeredBytes += data.length));
        socket.once('connect', () => socket.write(chunk));
        socket.once('end', () => socket.destroy());
        socket.once('close', () => {
          if (!timedOut) report.closedByServer += 1;
          clearTimeout(timer);
          resolve();
        });
      });
    }
  };
  await Promise.all(Array.from({ length: connections }, (_, i) => lane(i)));
  return report;
}

/**
 * `count` connections that each send part of a request's headers and then nothing, opened again as the server
 * closes them, until `untilMs`. Resolves with how many times the server closed one.
 */
export async function slowHeaderHolders(
  target: FloodTarget,
  count: number,
  head: string,
  untilMs: number,
): Promise<number> {
  let closed = 0;
  const open = new Set<Socket>();
  const lane = async (index: number) => {
    while (Date.now() < untilMs) {
      const localAddress = target.sources[index % target.sources.length];
      await new Promise<void>((resolve) => {
        const socket = connect({ host: target.host, port: target.port, localAddress });
        open.add(socket);
        socket.on('error', () => undefined);
        socket.once('connect', () => socket.write(head));
        const timer = setTimeout(() => socket.destroy(), Math.max(0, untilMs - Date.now()));
        socket.once('close', () => {
          open.delete(socket);
          if (Date.now() < untilMs) closed += 1;
          clearTimeout(timer);
          resolve();
        });
      });
      await sleep(10);
    }
  };
  await Promise.all(Array.from({ length: count }, (_, i) => lane(i)));
  for (const socket of open) socket.destroy();
  return closed;
}

/** 127.0.0.2 and up: `count` addresses other than the one the probes and callers use. */
export function otherLoopbackAddresses(count: number, from = 2): string[] {
  return Array.from({ length: count }, (_, i) => `127.0.0.${from + i}`);
}
