// What a chaos run starts, all on 127.0.0.1, with the processes a user runs: Redis with Sentinel (a primary, two
// replicas, three Sentinels), the gateway simulator (signed postbacks, strict logins), the internal application,
// a balancer in front of the replicas' postback receivers (the Service the gateway's webhook URL names) and three
// sidecar replicas, each `serve` from the built code in its own process, in fleet mode with queued postbacks, with
// the production settings that matter here: a state MAC key, a forward secret the application verifies.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { IMAGE_RUNTIME } from '../bench/stack.js';
import { freeStablePort } from '../test/support/free-port.js';
import { makeKeys } from '../test/support/keys.js';
import { startSentinelSet, type SentinelSet } from '../test/support/redis-topologies.js';
import type { TestRedis } from '../test/support/redis-server.js';
import { scratchDir } from '../test/support/scratch.js';
import { METRICS } from '../src/observability/metric-names.js';
import { DEFAULT_REDIS_KEY_PREFIX, RedisKeys, accountTag } from '../src/state/redis-keys.js';
import { startApplication, type Application } from './application.js';
import { startBalancer, type Balancer } from './balancer.js';

export const USERNAME = 'chaos@example.com';
/** The sidecar's deadline for the gateway's answer: a `commit-slow` fault answers after it. */
export const RESPONSE_TIMEOUT_MS = 5_000;
export const REDIS_COMMAND_TIMEOUT_MS = 500;

/** One replica slot: its ports stay the same across restarts, as a pod's address behind its Service does. */
export interface Replica {
  readonly index: number;
  readonly ports: { readonly proxy: number; readonly admin: number; readonly postback: number };
  /** The running process, undefined while it is down. */
  process: ChildProcess | undefined;
  /** Callers send to it only while it is in service (a pod being stopped leaves the endpoints first). */
  inService: boolean;
}

export interface World {
  readonly simulator: RunningSimulator;
  readonly redis: SentinelSet;
  readonly application: Application;
  readonly balancer: Balancer;
  readonly replicas: readonly Replica[];
  /** Starts replica `index` (it must be down) and resolves once it is ready; it is then in service. */
  startReplica(index: number): Promise<void>;
  /** SIGTERM (graceful) or SIGKILL; it leaves the service first. */
  stopReplica(index: number, signal: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  /** Whether every replica answers /readyz 200. */
  allReady(): Promise<boolean>;
  /** The data node the Sentinels name primary now. */
  primaryNode(): Promise<TestRedis>;
  /**
   * The wipes each replica slot counted (`signing_sidecar_state_store_wipes_total`), summed over the processes it
   * ran: a process's counter is read just before it is stopped, as a scrape would have, since a restart resets it.
   */
  wipeCounts(): Promise<number[]>;
  /** Undelivered postbacks in the fleet's inbox (the current primary's `postback:pending`). */
  inboxPending(): Promise<number>;
  /** A password rotation: the gateway's side and the Secret file together. */
  rotatePassword(): Promise<void>;
  close(): Promise<void>;
}

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** As the image runs it: the bundle, with the node flags of the Dockerfile's ENTRYPOINT and its ENV. */
const SERVE = [...IMAGE_RUNTIME.flags, 'dist/image/main.js', 'serve'];

/** `logDir`: each replica's stdout and stderr go to replica-N.log there (warnings and errors). */
/** `onCrash`: a replica process exited without stopReplica (out of memory, a crash). */
export async function startWorld(
  logDir: string,
  onCrash: (index: number, code: number | null, signal: NodeJS.Signals | null) => void = () => undefined,
): Promise<World> {
  if (!existsSync(join(ROOT, 'dist', 'image', 'main.js')))
    throw new Error('dist/image is missing: run "npm run bundle"');
  const dir = scratchDir('chaos-');
  const keys = await makeKeys();
  const file = (name: string, content: string): string => {
    const path = join(dir, name);
    writeFileSync(path, content, { mode: 0o600 });
    return path;
  };
  let password = randomBytes(18).toString('base64url');
  const passwordFile = file('password', `${password}\n`);
  const forwardSecret = `whsec_${randomBytes(24).toString('base64')}`;
  const redis = await startSentinelSet({
    replicas: 2,
    // As docs/fleet.md asks of a primary: refuse writes when cut off from every replica.
    args: ['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10'],
  });
  const application = await startApplication(forwardSecret, await freeStablePort());
  const balancer = await startBalancer();
  const simulator = await startSimulator({
    accounts: [
      {
        username: USERNAME,
        password,
        publicKeyPem: keys.publicKeyPem,
        webhookUrl: `${balancer.url}/postbacks`,
        signedPostbacks: true,
      },
    ],
    loginRevokesRefresh: true,
    // The gateway keeps retrying a postback (every 10 s at most) until a receiver takes it.
    postbackRetry: { initialDelayMs: 500, maxDelayMs: 10_000, maxAttempts: 0, timeoutMs: 10_000 },
  });
  const env: NodeJS.ProcessEnv = {
    SIDECAR_BASE_URL: simulator.baseUrl,
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: USERNAME,
    SIDECAR_PASSWORD_FILE: passwordFile,
    SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
    SIDECAR_LISTEN_HOST: '127.0.0.1',
    SIDECAR_ADMIN_HOST: '127.0.0.1',
    SIDECAR_LOG_LEVEL: 'warn',
    SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS: String(RESPONSE_TIMEOUT_MS),
    SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '1000',
    SIDECAR_SHUTDOWN_MAX_DELAY_MS: String(RESPONSE_TIMEOUT_MS + 2_000),
    ...redis.env,
    SIDECAR_REDIS_COMMAND_TIMEOUT_MS: String(REDIS_COMMAND_TIMEOUT_MS),
    SIDECAR_REDIS_MIN_REPLICAS_ACKED: '2',
    SIDECAR_STATE_MAC_KEY_FILE: file('state-mac-key', `${randomBytes(32).toString('base64')}\n`),
    SIDECAR_POSTBACK_FORWARD_URL: `${application.url}/postbacks`,
    SIDECAR_POSTBACK_FORWARD_SECRET_FILE: file('forward-secret', `${forwardSecret}\n`),
    SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
    SIDECAR_POSTBACK_PUBLIC_URL: `${balancer.url}/postbacks`,
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: file('gateway-postback.pub.pem', simulator.postbackPublicKeyPem),
    SIDECAR_POSTBACK_DELIVERY: 'queued',
    // Retries a few seconds apart (the default waits minutes): the run checks the inbox drains within 60 s.
    SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,1s,2s,3s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s',
    SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '3000',
    SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '10000',
  };
  // The inbox's "every undelivered postback" set, named as the replicas name it (docs/postbacks.md).
  const inboxKey = new RedisKeys(DEFAULT_REDIS_KEY_PREFIX, accountTag(new URL(simulator.baseUrl).origin, USERNAME)).key(
    'postback:pending',
  );
  const replicas: Replica[] = [];
  for (let index = 0; index < 3; index++) {
    const ports = { proxy: await freeStablePort(), admin: await freeStablePort(), postback: await freeStablePort() };
    replicas.push({ index, ports, process: undefined, inService: false });
  }
  const wipesOfStopped = replicas.map(() => 0);
  const wipesOf = async (replica: Replica): Promise<number> => {
    if (replica.process === undefined) return 0;
    const res = await fetch(`http://127.0.0.1:${replica.ports.admin}/metrics`, { signal: AbortSignal.timeout(2_000) });
    const line = (await res.text()).split('\n').find((l) => l.startsWith(`${METRICS.stateStoreWipes} `));
    return Number(line?.split(' ')[1] ?? 0);
  };
  const replicaAt = (index: number): Replica => {
    const replica = replicas[index];
    if (replica === undefined) throw new Error(`no replica ${index}`);
    return replica;
  };
  const ready = async (replica: Replica): Promise<boolean> => {
    if (replica.process === undefined) return false;
    const res = await fetch(`http://127.0.0.1:${replica.ports.admin}/readyz`, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.status === 200;
  };
  const world: World = {
    simulator,
    redis,
    application,
    balancer,
    replicas,
    async startReplica(index) {
      const replica = replicaAt(index);
      const log = createWriteStream(join(logDir, `replica-${index}.log`), { flags: 'a' });
      const child = spawn(process.execPath, SERVE, {
        cwd: ROOT,
        // Only PATH and HOME from this environment: a stray SIDECAR_* variable must not leak in.
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          ...IMAGE_RUNTIME.env,
          ...env,
          SIDECAR_LISTEN_PORT: String(replica.ports.proxy),
          SIDECAR_ADMIN_PORT: String(replica.ports.admin),
          SIDECAR_POSTBACK_LISTEN_PORT: String(replica.ports.postback),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout.pipe(log, { end: false });
      child.stderr.pipe(log, { end: false });
      child.once('exit', (code, signal) => {
        // stopReplica forgets the process before it stops it: one still held here died on its own.
        if (replica.process === child) onCrash(index, code, signal);
        setTimeout(() => log.end(), 100);
      });
      replica.process = child;
      const deadline = Date.now() + 60_000;
      while (!(await ready(replica).catch(() => false))) {
        if (child.exitCode !== null)
          throw new Error(`replica ${index} exited (${child.exitCode}): see replica-${index}.log`);
        if (Date.now() > deadline) throw new Error(`replica ${index} not ready within 60 s`);
        await sleep(100);
      }
      replica.inService = true;
      balancer.setTargets(liveTargets(replicas));
    },
    async stopReplica(index, signal) {
      const replica = replicaAt(index);
      replica.inService = false;
      balancer.setTargets(liveTargets(replicas));
      wipesOfStopped[index] = (wipesOfStopped[index] ?? 0) + (await wipesOf(replica).catch(() => 0));
      const running = replica.process;
      replica.process = undefined;
      if (running === undefined) return;
      if (running.exitCode !== null || running.signalCode !== null) return;
      const exited = new Promise((resolve) => running.once('exit', resolve));
      running.kill(signal);
      const timer = setTimeout(() => running.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
    async allReady() {
      const states = await Promise.all(replicas.map((replica) => ready(replica).catch(() => false)));
      return states.every(Boolean);
    },
    async primaryNode() {
      const address = await redis.currentPrimary();
      const node = redis.nodes.find((candidate) => address === `127.0.0.1:${candidate.port}`);
      if (node === undefined) throw new Error(`the Sentinels name an unknown primary ${address}`);
      return node;
    },
    async wipeCounts() {
      return Promise.all(
        replicas.map(async (replica) => (wipesOfStopped[replica.index] ?? 0) + (await wipesOf(replica).catch(() => 0))),
      );
    },
    async inboxPending() {
      const node = await world.primaryNode();
      const [count] = await node.cli('ZCARD', inboxKey);
      return Number(count);
    },
    async rotatePassword() {
      password = randomBytes(18).toString('base64url');
      // The gateway first (the vendor's portal), then the Secret (an atomic rename, as the kubelet does).
      const res = await fetch(`${simulator.listenUrl}/_sim/accounts/${encodeURIComponent(USERNAME)}/password`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ password }),
      });
      if (res.status !== 200) throw new Error(`password rotation refused: ${res.status} ${await res.text()}`);
      writeFileSync(`${passwordFile}.new`, `${password}\n`, { mode: 0o600 });
      renameSync(`${passwordFile}.new`, passwordFile);
    },
    async close() {
      await Promise.all(replicas.map((replica) => world.stopReplica(replica.index, 'SIGKILL')));
      await Promise.all([simulator.close(), application.close(), balancer.close(), redis.close()]);
    },
  };
  try {
    await Promise.all(replicas.map((replica) => world.startReplica(replica.index)));
  } catch (err) {
    await world.close();
    throw err;
  }
  return world;
}

const liveTargets = (replicas: readonly Replica[]): number[] =>
  replicas.filter((replica) => replica.inService).map((replica) => replica.ports.postback);

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
