// What a chaos run starts, with the processes a user runs: Redis with Sentinel (a primary, two replicas, three
// Sentinels), the gateway simulator (signed postbacks, strict logins), the internal application, a balancer in front
// of the replicas' postback receivers (the Service the gateway's webhook URL names) and three sidecar replicas, each
// `serve` from the built code in its own process, in fleet mode with queued postbacks, with the production settings
// that matter here: a state MAC key, a forward secret the application verifies.
// Two networks: all on 127.0.0.1 (`loopback`), or (`namespaces`, test/support/netns.ts) each Redis node, Sentinel
// and replica in a network namespace of its own with its own address, the runner's servers on the bridge's, so that
// the nemesis can cut the links between them and not only kill processes.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { IMAGE_RUNTIME } from '../bench/stack.js';
import { otherLoopbackAddresses } from '../test/support/floods.js';
import { freeStablePort } from '../test/support/free-port.js';
import { makeKeys } from '../test/support/keys.js';
import { createNetwork, prefixed, type Network, type Party } from '../test/support/netns.js';
import { startSentinelSet, type SentinelSet } from '../test/support/redis-topologies.js';
import type { TestRedis } from '../test/support/redis-server.js';
import { scratchDir } from '../test/support/scratch.js';
import { METRICS } from '../src/observability/metric-names.js';
import { DEFAULT_REDIS_KEY_PREFIX, RedisKeys, accountTag } from '../src/state/redis-keys.js';
import { STORE_EPOCH_KEY } from '../src/state/store-epoch.js';
import { startApplication, type Application } from './application.js';
import { startBalancer, type Balancer, type BalancerTarget } from './balancer.js';
import { gatewayControl, type GatewayControl } from './gateway-control.js';

export const USERNAME = 'chaos@example.com';
/** The sidecar's deadline for the gateway's answer: a `commit-slow` fault answers after it. */
export const RESPONSE_TIMEOUT_MS = 5_000;
export const REDIS_COMMAND_TIMEOUT_MS = 500;

export type NetworkMode = 'namespaces' | 'loopback';

export interface WorldOptions {
  /** `loopback` (the default): everything on 127.0.0.1. `namespaces`: see above; needs root, `ip` and `nft`. */
  readonly network?: NetworkMode;
}

/** The namespaces of a `namespaces` world: which party each process is, in the order of the world's lists. */
export interface WorldLinks {
  readonly net: Network;
  /** As `redis.nodes`: the first primary, then its replicas. */
  readonly nodes: readonly Party[];
  /** As `redis.sentinels`. */
  readonly sentinels: readonly Party[];
  /** As `replicas`. */
  readonly replicas: readonly Party[];
}

/** One replica slot: its address and ports stay the same across restarts, as a pod's behind its Service do. */
export interface Replica {
  readonly index: number;
  /** The address its listeners bind (127.0.0.1, or its namespace's). */
  readonly host: string;
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
  readonly network: NetworkMode;
  /** The namespaces and their links (`namespaces` only). */
  readonly links: WorldLinks | undefined;
  /** Source addresses other than the callers' (a hostile neighbour's): other loopback ones, or on the bridge. */
  readonly floodSources: readonly string[];
  /** The simulator's control API (its ledger, completions, faults, clock, password). */
  readonly control: GatewayControl;
  /** Starts replica `index` (it must be down) and resolves once it is ready; it is then in service. */
  startReplica(index: number): Promise<void>;
  /** SIGTERM (graceful) or SIGKILL; it leaves the service first. */
  stopReplica(index: number, signal: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  /** Whether every replica answers /readyz 200. */
  allReady(): Promise<boolean>;
  /** Whether replica `index` runs and answers /readyz 200. */
  isReady(index: number): Promise<boolean>;
  /** A replica's metric as its /metrics shows it now (undefined: the replica is down or does not answer). */
  metric(index: number, name: string): Promise<number | undefined>;
  /** The data node the Sentinels name primary now. */
  primaryNode(): Promise<TestRedis>;
  /**
   * The wipes each replica slot counted (`signing_sidecar_state_store_wipes_total`), summed over the processes it
   * ran: a process's counter is read just before it is stopped, as a scrape would have, since a restart resets it.
   */
  wipeCounts(): Promise<number[]>;
  /** Undelivered postbacks in the fleet's inbox (the current primary's `postback:pending`). */
  inboxPending(): Promise<number>;
  /** The fleet's store epoch on `node` (docs/fleet.md): it changes exactly when the dataset was wiped or replaced. */
  storeEpoch(node: TestRedis): Promise<string | undefined>;
  /** A password rotation: the gateway's side and the Secret file together. */
  rotatePassword(): Promise<void>;
  close(): Promise<void>;
}

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** As the image runs it: the bundle, with the node flags of the Dockerfile's ENTRYPOINT and its ENV. */
const SERVE = [...IMAGE_RUNTIME.flags, 'dist/image/main.js', 'serve'];

const REPLICAS = 3;
const REDIS_REPLICAS = 2;
const SENTINELS = 3;

/** `logDir`: each replica's stdout and stderr go to replica-N.log there (warnings and errors). */
/** `onCrash`: a replica process exited without stopReplica (out of memory, a crash). */
export async function startWorld(
  logDir: string,
  onCrash: (index: number, code: number | null, signal: NodeJS.Signals | null) => void = () => undefined,
  options: WorldOptions = {},
): Promise<World> {
  if (!existsSync(join(ROOT, 'dist', 'image', 'main.js')))
    throw new Error('dist/image is missing: run "npm run bundle"');
  const network = options.network ?? 'loopback';
  const links = network === 'namespaces' ? await namespaceLinks() : undefined;
  try {
    return await populate(logDir, onCrash, network, links);
  } catch (err) {
    await links?.net.close();
    throw err;
  }
}

/** The network and a namespace for each Redis node, Sentinel and replica. */
async function namespaceLinks(): Promise<WorldLinks> {
  const net = await createNetwork();
  try {
    const parties = async (kind: string, count: number): Promise<Party[]> => {
      const made: Party[] = [];
      for (let i = 0; i < count; i++) made.push(await net.addParty(`${kind}${i}`));
      return made;
    };
    return {
      net,
      nodes: await parties('redis', 1 + REDIS_REPLICAS),
      sentinels: await parties('sentinel', SENTINELS),
      replicas: await parties('sidecar', REPLICAS),
    };
  } catch (err) {
    await net.close();
    throw err;
  }
}

async function populate(
  logDir: string,
  onCrash: (index: number, code: number | null, signal: NodeJS.Signals | null) => void,
  network: NetworkMode,
  links: WorldLinks | undefined,
): Promise<World> {
  // Where the runner's own servers listen: the address every party reaches.
  const runnerHost = links?.net.bridgeAddress ?? '127.0.0.1';
  const place = (party: Party | undefined) =>
    party === undefined ? {} : { host: party.address, netns: party.spawnPrefix };
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
    replicas: REDIS_REPLICAS,
    // As docs/fleet.md asks of a primary: refuse writes when cut off from every replica.
    args: ['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10'],
    places: { nodes: links?.nodes.map(place), sentinels: links?.sentinels.map(place) },
  });
  const application = await startApplication(forwardSecret, await freeStablePort(), runnerHost);
  const balancer = await startBalancer(runnerHost);
  // In namespaces, on every address: the replicas reach it on the bridge's (the base URL they sign), the run's
  // control calls on loopback, the only clients the simulator's control API answers. Over HTTPS, with its
  // throwaway CA: outside loopback the sidecar takes no http:// gateway.
  const simulatorPort = links === undefined ? 0 : await freeStablePort();
  const simulator = await startSimulator({
    ...(links === undefined
      ? {}
      : {
          host: '0.0.0.0',
          port: simulatorPort,
          publicBaseUrl: `https://${runnerHost}:${simulatorPort}`,
          tls: true,
        }),
    accounts: [
      {
        username: USERNAME,
        password,
        publicKeyPem: keys.publicKeyPem,
        webhookUrl: `${balancer.url}/postbacks`,
        signedPostbacks: true,
        // The allowlisted egress addresses: the replicas'.
        ...(links === undefined ? {} : { allowIps: [links.net.subnet] }),
      },
    ],
    loginRevokesRefresh: true,
    // The gateway keeps retrying a postback (every 10 s at most) until a receiver takes it.
    postbackRetry: { initialDelayMs: 500, maxDelayMs: 10_000, maxAttempts: 0, timeoutMs: 10_000 },
  });
  const control = gatewayControl(simulator.listenUrl, simulator.caPem);
  const env: NodeJS.ProcessEnv = {
    SIDECAR_BASE_URL: simulator.baseUrl,
    ...(simulator.caPem === undefined ? {} : { SIDECAR_UPSTREAM_CA_FILE: file('gateway-ca.pem', simulator.caPem) }),
    SIDECAR_ENVIRONMENT: 'staging',
    SIDECAR_USERNAME: USERNAME,
    SIDECAR_PASSWORD_FILE: passwordFile,
    SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
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
    SIDECAR_POSTBACK_PUBLIC_URL: `${balancer.url}/postbacks`,
    SIDECAR_POSTBACK_PUBLIC_KEY_FILE: file('gateway-postback.pub.pem', simulator.postbackPublicKeyPem),
    SIDECAR_POSTBACK_DELIVERY: 'queued',
    // Retries a few seconds apart (the default waits minutes): the run checks the inbox drains within 60 s.
    SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,1s,2s,3s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s,5s',
    SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '3000',
    SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '10000',
    // Money limits on the fleet's records in Redis, under every fault: withdrawals above 450.00 refused (about a tenth
    // of them) and a minute's total that binds while traffic is calm; deposits watched in report mode. The checker
    // holds each refusal to its promise (nothing sent: never in the gateway's ledger).
    SIDECAR_LIMITS_FILE: file(
      'limits.yaml',
      `rules:
  - name: chaos-withdrawals
    route: /api/v2/transfer-out/init
    currency: EUR
    maxAmount: "450.00"
    windows: [{ period: 1m, maxTotal: "20000.00" }]
  - name: chaos-deposits
    route: /api/v2/transaction/init
    windows: [{ period: 1m, maxTotal: "100000.00" }]
    maxPerMinute: 300
    mode: report
`,
    ),
  };
  // Keys named as the replicas name them: the inbox's "every undelivered postback" set (docs/postbacks.md), the epoch.
  const fleetKeys = new RedisKeys(DEFAULT_REDIS_KEY_PREFIX, accountTag(new URL(simulator.baseUrl).origin, USERNAME));
  const inboxKey = fleetKeys.key('postback:pending');
  const epochKey = fleetKeys.key(STORE_EPOCH_KEY);
  const replicas: Replica[] = [];
  for (let index = 0; index < REPLICAS; index++) {
    const ports = { proxy: await freeStablePort(), admin: await freeStablePort(), postback: await freeStablePort() };
    const host = links?.replicas[index]?.address ?? '127.0.0.1';
    replicas.push({ index, host, ports, process: undefined, inService: false });
  }
  // Each replica's listeners on its own address: outside loopback the egress listener must be allowed to.
  const listenEnv = (replica: Replica): NodeJS.ProcessEnv => ({
    SIDECAR_LISTEN_HOST: replica.host,
    ...(links === undefined ? {} : { SIDECAR_LISTEN_ALLOW_NON_LOOPBACK: 'true' }),
    SIDECAR_ADMIN_HOST: replica.host,
    SIDECAR_POSTBACK_LISTEN_HOST: replica.host,
    SIDECAR_LISTEN_PORT: String(replica.ports.proxy),
    SIDECAR_ADMIN_PORT: String(replica.ports.admin),
    SIDECAR_POSTBACK_LISTEN_PORT: String(replica.ports.postback),
  });
  const floodSources = links === undefined ? otherLoopbackAddresses(8, 20) : await links.net.addBridgeAddresses(8);
  const wipesOfStopped = replicas.map(() => 0);
  const metricOf = async (replica: Replica, name: string): Promise<number | undefined> => {
    if (replica.process === undefined) return undefined;
    const res = await fetch(`http://${replica.host}:${replica.ports.admin}/metrics`, {
      signal: AbortSignal.timeout(2_000),
    });
    const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name} `));
    return line === undefined ? undefined : Number(line.split(' ')[1]);
  };
  const wipesOf = async (replica: Replica): Promise<number> => (await metricOf(replica, METRICS.stateStoreWipes)) ?? 0;
  const replicaAt = (index: number): Replica => {
    const replica = replicas[index];
    if (replica === undefined) throw new Error(`no replica ${index}`);
    return replica;
  };
  const ready = async (replica: Replica): Promise<boolean> => {
    if (replica.process === undefined) return false;
    const res = await fetch(`http://${replica.host}:${replica.ports.admin}/readyz`, {
      signal: AbortSignal.timeout(2_000),
    });
    await res.body?.cancel();
    return res.status === 200;
  };
  const world: World = {
    simulator,
    redis,
    application,
    balancer,
    replicas,
    network,
    links,
    floodSources,
    control,
    async startReplica(index) {
      const replica = replicaAt(index);
      const log = createWriteStream(join(logDir, `replica-${index}.log`), { flags: 'a' });
      // In its namespace, `ip netns exec` execs node in place: the child's pid is the replica's, for its signals.
      const child = spawn(...prefixed(links?.replicas[index]?.spawnPrefix ?? [], process.execPath, SERVE), {
        cwd: ROOT,
        // Only PATH and HOME from this environment: a stray SIDECAR_* variable must not leak in.
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          ...IMAGE_RUNTIME.env,
          ...env,
          ...listenEnv(replica),
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
    isReady: (index) => ready(replicaAt(index)).catch(() => false),
    metric: (index, name) => metricOf(replicaAt(index), name).catch(() => undefined),
    async primaryNode() {
      const address = await redis.currentPrimary();
      const node = redis.nodes.find((candidate) => address === `${candidate.host}:${candidate.port}`);
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
    async storeEpoch(node) {
      const [epoch] = await node.cli('GET', epochKey);
      return epoch;
    },
    async rotatePassword() {
      password = randomBytes(18).toString('base64url');
      // The gateway first (the vendor's portal), then the Secret (an atomic rename, as the kubelet does).
      const answer = await control.call('PUT', `/_sim/accounts/${encodeURIComponent(USERNAME)}/password`, {
        password,
      });
      if (answer.status !== 200) throw new Error(`password rotation refused: ${answer.status} ${answer.text}`);
      writeFileSync(`${passwordFile}.new`, `${password}\n`, { mode: 0o600 });
      renameSync(`${passwordFile}.new`, passwordFile);
    },
    async close() {
      await Promise.all(replicas.map((replica) => world.stopReplica(replica.index, 'SIGKILL')));
      control.close();
      await Promise.all([simulator.close(), application.close(), balancer.close(), redis.close()]);
      await links?.net.close();
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

const liveTargets = (replicas: readonly Replica[]): BalancerTarget[] =>
  replicas
    .filter((replica) => replica.inService)
    .map((replica) => ({ host: replica.host, port: replica.ports.postback }));

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
