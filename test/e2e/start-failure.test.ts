// A start that fails half-way (a port taken after another listener already listens) stops what it had started and
// rejects with the error: no listener, store connection or timer of a sidecar that never ran is left behind.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startSidecar } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';
import { gatewayKeys, keyFile, PUBLIC_URL } from '../postback/support.js';
import { makeKeys } from '../support/keys.js';
import { closeNow, listenOnLoopback } from '../support/loopback-server.js';
import { startRedis } from '../support/redis-server.js';
import { CapturedOutput, sidecarEnv, startTestSidecar } from '../support/sidecar.js';

const FIXTURE = join(import.meta.dirname, '../support/failing-start.ts');
/** Node's channel for every server that has started listening (its address known). */
const LISTENING = 'tracing:net.server.listen:asyncEnd';
/** No gateway is needed: the egress side points at a port nothing listens on. */
const NO_GATEWAY = 'http://127.0.0.1:1';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A server on 127.0.0.1:0 that holds its port, so that a listener of the sidecar's told to use it cannot. */
async function takenPort(): Promise<{ readonly port: number; release(): Promise<void> }> {
  const server: Server = createServer();
  const url = await listenOnLoopback(server);
  const release = () => (server.listening ? closeNow(server) : Promise.resolve());
  cleanups.push(release);
  return { port: Number(new URL(url).port), release };
}

/** "connected", or the connect error's code (ECONNREFUSED once nothing listens on the port). */
function tryConnect(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

/** Runs `start`, recording the port of every server of this process that started listening meanwhile. */
async function portsListenedDuring(start: () => Promise<unknown>): Promise<number[]> {
  const ports: number[] = [];
  const onListening = (message: unknown): void => {
    const address = (message as { readonly server: { address(): unknown } }).server.address();
    if (address !== null && typeof address === 'object') ports.push((address as { readonly port: number }).port);
  };
  subscribe(LISTENING, onListening);
  try {
    await start();
  } finally {
    unsubscribe(LISTENING, onListening);
  }
  return ports;
}

interface ChildEnd {
  readonly exitCode: number | null;
  readonly killed: boolean;
  readonly stdout: string;
}

/** The failing-start fixture in its own process, killed if it has not ended by itself within `ms`. */
function failingStart(env: NodeJS.ProcessEnv, ms: number): Promise<ChildEnd> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      ['--import', 'tsx', FIXTURE],
      { env: { PATH: process.env.PATH, ...env }, timeout: ms },
      (_error, stdout) => resolve({ exitCode: child.exitCode, killed: child.killed, stdout }),
    );
  });
}

describe('a start that fails half-way', () => {
  it('the admin port taken: rejects with EADDRINUSE, the egress listener it had opened is closed, and the same settings start once the port is free', async () => {
    const admin = await takenPort();
    const env = await sidecarEnv(await makeKeys(), NO_GATEWAY, { SIDECAR_ADMIN_PORT: String(admin.port) });
    const ports = await portsListenedDuring(() =>
      assert.rejects(startSidecar(loadConfig(env), { logDestination: new CapturedOutput() }), {
        code: 'EADDRINUSE',
      }),
    );
    // The egress listener listens before the admin listener: it had its port when the start failed.
    const [egressPort, ...others] = ports;
    assert.ok(egressPort !== undefined && others.length === 0, `one listener listened (${ports.join(', ')})`);
    assert.equal(await tryConnect(egressPort), 'ECONNREFUSED');
    await admin.release();
    const running = await startTestSidecar(env);
    try {
      assert.equal(new URL(running.sidecar.adminUrl).port, String(admin.port));
      assert.equal((await fetch(`${running.sidecar.adminUrl}/livez`)).status, 200);
    } finally {
      await running.stop();
    }
  });

  it('the postback port taken, on Redis with queued delivery: rejects with EADDRINUSE and leaves nothing that keeps the process alive', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const gateway = await gatewayKeys();
    const env = await sidecarEnv(await makeKeys(), NO_GATEWAY, {
      SIDECAR_LOG_LEVEL: 'info',
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: redis.url,
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_POSTBACK_FORWARD_URL: 'http://127.0.0.1:1/internal/postbacks',
      SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem),
      SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
      SIDECAR_POSTBACK_LISTEN_PORT: String((await takenPort()).port),
    });
    // By then the egress and admin listeners listen, the store holds its Redis connections and its epoch checks.
    const end = await failingStart(env, 30_000);
    assert.deepEqual(JSON.parse(end.stdout.trim().split('\n').at(-1) ?? '{}'), { code: 'EADDRINUSE' });
    assert.equal(end.killed, false, 'the process ended by itself');
    assert.equal(end.exitCode, 0);
  });
});
