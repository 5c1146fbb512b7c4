/**
 * A real Squid (Debian's `squid` package) as the site's forward proxy, one per call, on 127.0.0.1.
 *
 *   const squid = await startSquid({ gatewayPort });             // CONNECT to 127.0.0.1:<gatewayPort> only
 *   const squid = await startSquid({ gatewayPort, auth: true }); // and Basic auth (squid.username/password)
 *   const squid = await startSquid({ gatewayPort, tls });       // TLS to Squid itself (https_port), no plain port
 *   squid.url                   // 'http://127.0.0.1:<port>' ('https://' with tls), never with credentials in it
 *   squid.connects()            // the CONNECT lines of its access log: [{ status, target, user }]
 *   await squid.allowPort(other) // new rules (SIGHUP): CONNECT to that port only; resolves once in force
 *   await squid.close();        // SIGTERM, SIGKILL after 5 s (also done when the test process exits)
 *
 * The rules are the ones docs/operations.md gives operators: CONNECT to the gateway's host and port only (plus
 * authentication when on), everything else denied, nothing cached. Squid cannot listen on port 0: the port comes
 * from free-port.ts. Run as root, Squid insists on dropping to another user: its folder is then made writable
 * by `nobody`. Each instance has its own service name, so parallel ones never share shared-memory segments.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freeStablePort } from './free-port.js';
import { scratchDir } from './scratch.js';

const run = promisify(execFile);
const SQUID = '/usr/sbin/squid';
const NCSA_AUTH = '/usr/lib/squid/basic_ncsa_auth';

export interface SquidOptions {
  /** The gateway's port: the one port CONNECT is allowed to. */
  readonly gatewayPort: number;
  /** Require Basic authentication: a user with a random password, in an htpasswd file (openssl passwd -apr1). */
  readonly auth?: boolean;
  /**
   * Squid's own certificate and key (PEM): it then listens with TLS only (`https_port`; Debian's Squid is built
   * with GnuTLS), the CONNECT and its answer travel inside that TLS, and `url` is https://.
   */
  readonly tls?: { readonly certPem: string; readonly keyPem: string };
}

export interface ConnectLine {
  /** Squid's answer to the CONNECT (200: tunnel up; 403, 407, 503...). */
  readonly status: number;
  /** host:port asked for. */
  readonly target: string;
  /** The authenticated user, or '-'. */
  readonly user: string;
}

export interface TestSquid {
  readonly url: string;
  readonly port: number;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly dir: string;
  /** Every line of the access log (Squid writes a line when a transaction ends: a tunnel when it closes). */
  accessLog(): Promise<string[]>;
  connects(): Promise<ConnectLine[]>;
  /**
   * Rewrites the rules to allow CONNECT to `port` only and has Squid read them again (SIGHUP); resolves once a
   * CONNECT to `probePort` gets `expect` (a probe of its own, which shows in the access log).
   */
  allowPort(port: number, probePort: number, expect: number): Promise<void>;
  close(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startSquid(options: SquidOptions): Promise<TestSquid> {
  const dir = scratchDir('squid-');
  const port = await freeStablePort();
  const auth = options.auth ? await htpasswd(dir) : undefined;
  const listener = options.tls === undefined ? `http_port 127.0.0.1:${port}` : await httpsPort(dir, port, options.tls);
  const accessLogFile = join(dir, 'access.log');
  const config = join(dir, 'squid.conf');
  await writeFile(config, squidConf(dir, listener, options.gatewayPort, auth?.file));
  if (process.getuid?.() === 0) await chmod(dir, 0o777);
  const child = await spawnSquid(config, `sidecartest${port}`, port, dir);
  const accessLog = async (): Promise<string[]> => {
    const text = await readFile(accessLogFile, 'utf8').catch(() => '');
    return text.split('\n').filter((line) => line !== '');
  };
  return {
    url: `${options.tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`,
    port,
    username: auth?.username,
    password: auth?.password,
    dir,
    accessLog,
    connects: async () => (await accessLog()).map(parseLine).filter((line) => line !== undefined),
    allowPort: async (allowed, probePort, expect) => {
      await writeFile(config, squidConf(dir, listener, allowed, auth?.file));
      child.kill('SIGHUP');
      const until = Date.now() + 10_000;
      while ((await connectStatus(port, probePort, auth, options.tls !== undefined)) !== expect) {
        if (Date.now() > until) throw new Error(`squid's new rules not in force after 10 s`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    close: () => stopSquid(child),
  };
}

/** The TLS listener's line, its certificate and key written beside the config (readable once Squid drops root). */
async function httpsPort(dir: string, port: number, tls: { certPem: string; keyPem: string }): Promise<string> {
  const [cert, key] = [join(dir, 'proxy-cert.pem'), join(dir, 'proxy-key.pem')];
  await writeFile(cert, tls.certPem, { mode: 0o644 });
  await writeFile(key, tls.keyPem, { mode: 0o644 });
  return `https_port 127.0.0.1:${port} tls-cert=${cert} tls-key=${key}`;
}

function squidConf(dir: string, listener: string, gatewayPort: number, passwords: string | undefined): string {
  const lines = [
    listener,
    `pid_filename ${join(dir, 'squid.pid')}`,
    `access_log stdio:${join(dir, 'access.log')}`,
    `cache_log ${join(dir, 'cache.log')}`,
    `coredump_dir ${dir}`,
    'cache deny all',
    'cache_mem 0 MB',
    'memory_cache_shared off',
    'shutdown_lifetime 0 seconds',
    // Only with root privileges; a non-root Squid runs as whoever started it.
    'cache_effective_user nobody',
    'dns_v4_first on',
    'acl CONNECT method CONNECT',
    `acl gateway_port port ${gatewayPort}`,
    'acl gateway_host dst 127.0.0.1/32',
    'http_access deny !CONNECT',
    'http_access deny !gateway_port',
    'http_access deny !gateway_host',
  ];
  if (passwords !== undefined) {
    lines.push(
      `auth_param basic program ${NCSA_AUTH} ${passwords}`,
      'auth_param basic children 2',
      'auth_param basic realm signing-sidecar test proxy',
      // A rotated password is checked at once, not answered from a cache of the old verdict.
      'auth_param basic credentialsttl 1 second',
      'authenticate_ttl 1 second',
      'acl authenticated proxy_auth REQUIRED',
      'http_access deny !authenticated',
    );
  }
  lines.push('http_access allow CONNECT gateway_port gateway_host', 'http_access deny all', '');
  return lines.join('\n');
}

async function htpasswd(dir: string): Promise<{ username: string; password: string; file: string }> {
  const username = 'sidecar';
  const password = `proxy-pw-${Math.random().toString(36).slice(2)}-${Date.now().toString(36)}`;
  const { stdout } = await run('openssl', ['passwd', '-apr1', password], { timeout: 5_000 });
  const file = join(dir, 'passwords');
  await writeFile(file, `${username}:${stdout.trim()}\n`, { mode: 0o644 });
  return { username, password, file };
}

/** Starts Squid in the foreground and resolves once its port accepts connections. */
async function spawnSquid(config: string, name: string, port: number, dir: string): Promise<ChildProcess> {
  const child = spawn(SQUID, ['-N', '-n', name, '-f', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  let output = '';
  const collect = (chunk: Buffer) => {
    if (output.length < 20_000) output += chunk.toString('utf8');
  };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const exited = new Promise<never>((_resolve, reject) => {
    child.once('error', (err) => reject(new Error(`cannot run ${SQUID} (apt-get install squid): ${err.message}`)));
    child.once('exit', (code) => {
      running.delete(child);
      reject(new Error(`squid exited with ${code}:\n${output}${cacheLog(dir)}`));
    });
  });
  exited.catch(() => undefined);
  const until = Date.now() + 15_000;
  for (;;) {
    if (await accepts(port)) return child;
    if (Date.now() > until) {
      child.kill('SIGKILL');
      throw new Error(`squid did not listen on ${port} in time:\n${output}`);
    }
    await Promise.race([new Promise((resolve) => setTimeout(resolve, 50)), exited]);
  }
}

function cacheLog(dir: string): string {
  return ` (see ${join(dir, 'cache.log')})`;
}

/** The status of Squid's answer to one CONNECT to 127.0.0.1:<target> (0: no answer); over TLS to a TLS Squid. */
function connectStatus(
  port: number,
  target: number,
  auth: { username: string; password: string } | undefined,
  tls: boolean,
) {
  return new Promise<number>((resolve) => {
    // The probe only reads Squid's answer: whose certificate it is does not matter here.
    const socket = tls
      ? tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false })
      : connect({ host: '127.0.0.1', port });
    const credentials =
      auth === undefined
        ? ''
        : `Proxy-Authorization: Basic ${Buffer.from(`${auth.username}:${auth.password}`).toString('base64')}\r\n`;
    let answer = '';
    const done = (status: number) => {
      socket.destroy();
      resolve(status);
    };
    socket.setTimeout(2_000, () => done(0));
    socket.once('error', () => done(0));
    socket.once('close', () => done(0));
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString('latin1');
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1];
      if (status !== undefined) done(Number(status));
    });
    socket.write(`CONNECT 127.0.0.1:${target} HTTP/1.1\r\nHost: 127.0.0.1:${target}\r\n${credentials}\r\n`);
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function stopSquid(child: ChildProcess): Promise<void> {
  if (!running.has(child)) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
  running.delete(child);
}

/** Squid's native access log: time elapsed client code/status bytes method URL user hierarchy type. */
function parseLine(line: string): ConnectLine | undefined {
  const fields = line.trim().split(/\s+/);
  if (fields[5] !== 'CONNECT') return undefined;
  const status = Number(fields[3]?.split('/')[1]);
  return { status, target: fields[6] ?? '', user: fields[7] ?? '-' };
}
