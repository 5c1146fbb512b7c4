/**
 * A real redis-server (Debian's `redis-server` package) for tests, one per call, on 127.0.0.1 by default.
 *
 *   const redis = await startRedis();                  // plain redis://, default user, no password
 *   const redis = await startRedis({ tls: true });     // rediss:// only; trust redis.caFile (or redis.caPem)
 *   const redis = await startRedis({ user: true });    // an ACL user (redis.username, redis.passwordFile)
 *   redis.url                  // 'redis://127.0.0.1:<port>' (or rediss://), never with credentials in it
 *   await redis.stop();        // an outage: the server exits (SIGTERM); clients see their connections close
 *   await redis.start();       // the same server again on the same port: empty (nothing is persisted), and with
 *                              // the ACL rules of the command line (changes made with cli('ACL', ...) are gone)
 *   await redis.restart();     // stop() then start()
 *   await redis.crash();       // SIGKILL: the server dies at once, as a failed node does (start() brings it back)
 *   redis.freeze() / thaw()    // SIGSTOP / SIGCONT: a Redis that accepts nothing and answers nothing (slow/hung)
 *   await redis.cli('KEYS', '*')   // redis-cli against it (as the default user, with TLS when on): stdout lines
 *   await redis.close();       // stop for good (also done when the test process exits, pass or fail)
 *   await startRedis({ host: party.address, netns: party.spawnPrefix })   // in a network namespace of netns.ts,
 *                              // bound to its address; a restart comes back there; cli() reaches it from here
 *
 * Nothing is persisted (`--save '' --appendonly no`); the working folder is a scratch folder. redis-server
 * cannot listen on port 0, so the port comes from free-port.ts, below the ephemeral range: after a stop(), no
 * port-0 listener of another test can take it before start(). The ACL user gets the rules docs/fleet.md gives
 * operators (keys and channels under the prefix, only the commands the sidecar sends), so a test with `user`
 * also proves those rules are enough. The default user stays open for redis-cli.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { generateTlsMaterial } from '../../packages/simulator/src/tls.js';
import { freeStablePort } from './free-port.js';
import { prefixed } from './netns.js';
import { scratchDir } from './scratch.js';

const run = promisify(execFile);

/** The ACL rules docs/fleet.md recommends for the sidecar's user (prefix signing-sidecar:). */
export const SIDECAR_ACL_RULES = [
  'resetkeys',
  '~signing-sidecar:*',
  'resetchannels',
  '&signing-sidecar:*',
  '-@all',
  '+get',
  '+set',
  '+del',
  '+pttl',
  '+eval',
  '+evalsha',
  '+publish',
  '+subscribe',
  '+unsubscribe',
  '+ping',
  '+select',
  '+wait',
  '+role',
  // Queued postback delivery (the inbox): the stream, read by a consumer group; the rest runs inside its scripts,
  // which Redis checks against the same rules.
  '+xgroup|create',
  '+xreadgroup',
  '+xautoclaim',
  '+xadd',
  '+xack',
  '+xdel',
  '+exists',
  '+hset',
  '+hget',
  '+hmget',
  '+hdel',
  '+hincrby',
  '+zadd',
  '+zrem',
  '+zrange',
  '+zrangebyscore',
  '+zscore',
  '+zcard',
  '+rpush',
  '+lpop',
  '+lindex',
  '+lrem',
] as const;

export interface RedisOptions {
  /** Serve rediss:// only (a throwaway CA in caFile; the certificate names localhost and 127.0.0.1). */
  readonly tls?: boolean;
  /** Create an ACL user with a random password, restricted by `acl` (default SIDECAR_ACL_RULES). */
  readonly user?: boolean;
  readonly acl?: readonly string[];
  /** More redis-server arguments, e.g. ['--notify-keyspace-events', 'Kx']. */
  readonly args?: readonly string[];
  /** The address it binds and is reached at (default 127.0.0.1). */
  readonly host?: string;
  /** Put before `redis-server` to start it (a network namespace's `ip netns exec NAME`); none by default. */
  readonly netns?: readonly string[];
}

/** Where a server runs: an address, and the command prefix that starts a process there. */
export type RedisPlace = Pick<RedisOptions, 'host' | 'netns'>;

export interface TestRedis {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** PEM of the CA that signed the server certificate, and a file holding it (tls only). */
  readonly caPem: string | undefined;
  readonly caFile: string | undefined;
  /** The ACL user, its password and a file holding the password (user only). */
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly passwordFile: string | undefined;
  readonly dir: string;
  /** `extraArgs` for this start only, after the others (e.g. ['--replicaof', 'no', 'one'] overrides a replicaof). */
  start(extraArgs?: readonly string[]): Promise<void>;
  stop(): Promise<void>;
  crash(): Promise<void>;
  restart(): Promise<void>;
  freeze(): void;
  thaw(): void;
  cli(...args: string[]): Promise<string[]>;
  close(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startRedis(options: RedisOptions = {}): Promise<TestRedis> {
  const dir = scratchDir('redis-');
  const host = options.host ?? '127.0.0.1';
  const port = await freeStablePort();
  const tls = options.tls ? await tlsFiles(dir) : undefined;
  const user = options.user ? await aclUser(dir) : undefined;
  const args = serverArgs(dir, host, port, tls, options.args ?? []);
  if (user) args.push('--user', user.name, 'on', `>${user.password}`, ...(options.acl ?? SIDECAR_ACL_RULES));
  let child: ChildProcess | undefined;

  const start = async (extraArgs: readonly string[] = []) => {
    if (child) return;
    child = await spawnServer([...args, ...extraArgs], options.netns ?? []);
  };
  const stopWith = async (signal: NodeJS.Signals) => {
    const current = child;
    child = undefined;
    if (!current) return;
    running.delete(current);
    if (current.exitCode !== null || current.signalCode !== null) return;
    current.kill('SIGCONT');
    const exited = once(current, 'exit');
    current.kill(signal);
    await exited;
  };
  const stop = () => stopWith('SIGTERM');
  await start();
  const cliBase = ['-h', host, '-p', String(port), '--no-auth-warning'];
  if (tls) cliBase.push('--tls', '--cacert', tls.caFile);
  return {
    url: `${tls ? 'rediss' : 'redis'}://${host}:${port}`,
    host,
    port,
    caPem: tls?.caPem,
    caFile: tls?.caFile,
    username: user?.name,
    password: user?.password,
    passwordFile: user?.file,
    dir,
    start,
    stop,
    crash: () => stopWith('SIGKILL'),
    restart: async () => {
      await stop();
      await start();
    },
    freeze: () => void child?.kill('SIGSTOP'),
    thaw: () => void child?.kill('SIGCONT'),
    cli: async (...cliArgs: string[]) => {
      const { stdout } = await run('redis-cli', [...cliBase, ...cliArgs], { timeout: 5_000 });
      return stdout.split('\n').filter((line) => line !== '');
    },
    close: stop,
  };
}

/** A replica of `primary`, once the primary lists it as online (synced: it can acknowledge writes). */
export async function startReplica(primary: TestRedis, timeoutMs = 20_000, place: RedisPlace = {}): Promise<TestRedis> {
  const replica = await startRedis({ ...place, args: ['--replicaof', primary.host, String(primary.port)] });
  const deadline = Date.now() + timeoutMs;
  while (!(await primary.cli('INFO', 'replication')).some((line) => /^slave\d+:.*state=online/.test(line))) {
    if (Date.now() > deadline) {
      await replica.close();
      throw new Error('the replica never synced');
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return replica;
}

function serverArgs(
  dir: string,
  host: string,
  port: number,
  tls: TlsFiles | undefined,
  extra: readonly string[],
): string[] {
  const args = ['--bind', host, '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no'];
  // Outside loopback, clients come from other addresses (a namespace network's): protected mode would refuse them
  // all, the default user having no password.
  if (!host.startsWith('127.')) args.push('--protected-mode', 'no');
  args.push('--loglevel', 'notice', '--logfile', '');
  if (tls) {
    args.push(
      '--port',
      '0',
      '--tls-port',
      String(port),
      '--tls-cert-file',
      tls.certFile,
      '--tls-key-file',
      tls.keyFile,
    );
    // Clients show no certificate of their own, as the sidecar does against a managed Redis.
    args.push('--tls-ca-cert-file', tls.caFile, '--tls-auth-clients', 'no');
  } else {
    args.push('--port', String(port));
  }
  return [...args, ...extra];
}

/**
 * Starts redis-server (after `prefix`, which execs it in place: the child is redis-server itself, for signals) and
 * resolves once it accepts connections (it says so on stdout).
 */
async function spawnServer(args: readonly string[], prefix: readonly string[]): Promise<ChildProcess> {
  const child = spawn(...prefixed(prefix, 'redis-server', args), { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start in time:\n${output}`)), 10_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (!output.includes('Ready to accept connections')) return;
      clearTimeout(timer);
      child.stdout.off('data', onData);
      child.stderr.off('data', onData);
      resolve();
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run redis-server (apt-get install redis-server): ${err.message}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`redis-server exited with ${code}:\n${output}`));
    });
  });
  // Keep draining its output so a chatty server never blocks on a full pipe.
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

interface TlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile: string;
  readonly caPem: string;
}

async function tlsFiles(dir: string): Promise<TlsFiles> {
  const material = await generateTlsMaterial();
  const files = { certFile: join(dir, 'server.crt'), keyFile: join(dir, 'server.key'), caFile: join(dir, 'ca.crt') };
  await writeFile(files.certFile, material.certPem);
  await writeFile(files.keyFile, material.keyPem, { mode: 0o600 });
  await writeFile(files.caFile, material.caPem!);
  return { ...files, caPem: material.caPem! };
}

async function aclUser(dir: string): Promise<{ name: string; password: string; file: string }> {
  const password = `pw-${Math.random().toString(36).slice(2)}-${Date.now().toString(36)}`;
  const file = join(dir, 'redis-password');
  // As a Kubernetes Secret file often is: with a trailing newline, which the sidecar must strip.
  await writeFile(file, `${password}\n`, { mode: 0o600 });
  return { name: 'signing-sidecar', password, file };
}
