// `gateway-simulator`: runs the gateway simulator until SIGTERM/SIGINT. Accounts come from a config file
// or, for a single account, entirely from flags. Everything a vendor must copy into their own setup (listen URL,
// base URL, CA file, postback key) is printed or written to files.
import { readFile, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { parseArgs } from 'node:util';
import type { Writable } from 'node:stream';
import { AccountConfigError, createSimLogger, readAccountsFile, startSimulator } from './index.js';
import type { RunningSimulator, SimulatorAccountInput, SimulatorOptions } from './index.js';

/** What the command touches, injected so that tests capture its output and stop it without a signal. */
export interface SimulateIo {
  readonly stdout: Writable;
  readonly stderr: Writable;
  /** Resolves when the process is asked to stop (SIGTERM/SIGINT). */
  readonly stopSignal: Promise<NodeJS.Signals>;
}

/** 0 ok, 1 a runtime failure, 2 bad usage: the sidecar's exit codes. */
export const EXIT = { ok: 0, failed: 1, usage: 2 } as const;
type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export const DEFAULT_SIMULATOR_PORT = 8443;
/** pino's levels; anything else makes pino throw at start-up, which would be a runtime failure (exit 1). */
const LOG_LEVELS: readonly string[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

const HELP = `Usage: gateway-simulator [options]

Runs a strict, stateful stand-in for the Payment Gateway v2 API (tokens, signed requests, postbacks).

Accounts (either a file or one account from flags):
  --config FILE             accounts file, JSON or YAML: {"accounts": [{username, password | password_file,
                            public_key_file | public_key_pem, allow_ips, webhook_url, signed_postbacks}]}
  --username EMAIL          vendor account email
  --password VALUE          account password (prefer --password-file)
  --password-file FILE      file holding the password
  --public-key FILE         vendor RSA public key, PEM, >= 2048 bits
  --allow-ip ADDR           allowlisted source address or CIDR, repeatable (default 127.0.0.1 and ::1)
  --webhook-url URL         where postbacks are sent
  --signed-postbacks        sign postbacks with the simulator's key

Server:
  --host HOST               listen address (default 127.0.0.1)
  --port PORT               listen port (default ${DEFAULT_SIMULATOR_PORT}; 0 picks a free one)
  --public-base-url URL     base address clients sign for (default: the listen URL)
  --tls                     serve HTTPS with a generated throwaway CA and certificate
  --tls-cert FILE --tls-key FILE   serve HTTPS with this certificate and key
  --ca-out FILE             write the PEM clients must trust (SIDECAR_UPSTREAM_CA_FILE)
  --postback-key-out FILE   write the simulator's postback public key (PEM)
  --access-ttl SECONDS      access token lifetime (default 900)
  --refresh-ttl SECONDS     refresh token lifetime (default 28800)
  --refresh-token-field NAME  field carrying the refresh token in the refresh grant (default refresh_token)
  --login-revokes-refresh   a password login also revokes every earlier refresh token of the account
  --postback-delay MS       complete new transactions with SUCCESS after MS (default: only via /_sim/)
  --log-level LEVEL         pino level (default info)
  -h, --help                show this help

Control API (loopback only): GET /_sim/transactions, POST /_sim/transactions/:id/complete {"status"},
POST /_sim/clock {"offset_seconds"|"shift_seconds"}, POST /_sim/faults {"kind","count","delay_ms","target"},
GET /_sim/postbacks. POST and DELETE calls need Content-Type: application/json.
`;

const OPTIONS = {
  config: { type: 'string' },
  username: { type: 'string' },
  password: { type: 'string' },
  'password-file': { type: 'string' },
  'public-key': { type: 'string' },
  'allow-ip': { type: 'string', multiple: true },
  'webhook-url': { type: 'string' },
  'signed-postbacks': { type: 'boolean' },
  host: { type: 'string' },
  port: { type: 'string' },
  'public-base-url': { type: 'string' },
  tls: { type: 'boolean' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'ca-out': { type: 'string' },
  'postback-key-out': { type: 'string' },
  'access-ttl': { type: 'string' },
  'refresh-ttl': { type: 'string' },
  'refresh-token-field': { type: 'string' },
  'login-revokes-refresh': { type: 'boolean' },
  'postback-delay': { type: 'string' },
  'log-level': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Flags = ReturnType<typeof parseFlags>['values'];

/** Bad usage: exit 2 with a message, as opposed to a runtime failure (exit 1). */
class UsageError extends Error {}

function parseFlags(argv: string[]) {
  return parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false });
}

export async function simulate(argv: string[], io: SimulateIo): Promise<ExitCode> {
  let flags: Flags;
  try {
    flags = parseFlags(argv).values;
  } catch (err) {
    return usage(io, (err as Error).message);
  }
  if (flags.help === true) {
    io.stdout.write(HELP);
    return EXIT.ok;
  }
  let options: SimulatorOptions;
  try {
    options = await buildOptions(flags, io);
  } catch (err) {
    if (err instanceof UsageError) return usage(io, err.message);
    io.stderr.write(`gateway-simulator: ${(err as Error).message}\n`);
    return EXIT.failed;
  }
  return run(options, flags, io);
}

async function run(
  options: SimulatorOptions,
  flags: Flags,
  io: SimulateIo,
): Promise<typeof EXIT.ok | typeof EXIT.failed> {
  let sim;
  try {
    sim = await startSimulator(options);
    if (flags['ca-out'] !== undefined && sim.caPem !== undefined) await writeFile(flags['ca-out'], sim.caPem);
    if (flags['postback-key-out'] !== undefined) await writeFile(flags['postback-key-out'], sim.postbackPublicKeyPem);
  } catch (err) {
    await sim?.close();
    const prefix = err instanceof AccountConfigError ? 'invalid account: ' : '';
    io.stderr.write(`gateway-simulator: ${prefix}${(err as Error).message}\n`);
    return EXIT.failed;
  }
  io.stdout.write(
    [
      ...listenLines(flags, sim),
      `public base URL (sign for this): ${sim.baseUrl}`,
      `dashboard (loopback clients only): ${sim.listenUrl}/_sim/`,
      ...(flags['ca-out'] !== undefined && sim.caPem !== undefined ? [`CA written to ${flags['ca-out']}`] : []),
      ...(flags['postback-key-out'] !== undefined
        ? [`postback public key written to ${flags['postback-key-out']}`]
        : []),
      '',
    ].join('\n'),
  );
  const signal = await io.stopSignal;
  io.stderr.write(`gateway-simulator: ${signal} received, closing\n`);
  await sim.close();
  return EXIT.ok;
}

/** True for an address that binds every interface: 0.0.0.0, or the IPv6 "::" in any spelling. */
function isWildcard(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '');
  return bare === '0.0.0.0' || (isIP(bare) === 6 && /^[0:]+$/.test(bare));
}

/**
 * Where it listens. A wildcard bind is not an address anyone can connect to, so it is shown as what it is (every
 * interface) followed by the URL a client on this host uses, and what clients on other hosts still need.
 */
function listenLines(flags: Flags, sim: RunningSimulator): string[] {
  const host = flags.host;
  if (host === undefined || !isWildcard(host)) return [`gateway simulator listening on ${sim.listenUrl}`];
  const bound = host.includes(':') ? `[${host.replace(/^\[|\]$/g, '')}]` : host;
  const scope = host.includes(':') ? 'every interface' : 'every IPv4 interface';
  const missing = [
    ...(flags['public-base-url'] === undefined ? ['--public-base-url (the address they post to and sign for)'] : []),
    ...(flags['allow-ip'] === undefined ? ['--allow-ip (their addresses)'] : []),
  ];
  return [
    `gateway simulator listening on ${bound}:${sim.port} (${scope})`,
    `from this host: ${sim.listenUrl}`,
    ...(missing.length > 0 ? [`clients on other hosts also need ${missing.join(' and ')}`] : []),
  ];
}

async function buildOptions(flags: Flags, io: SimulateIo): Promise<SimulatorOptions> {
  if ((flags['tls-cert'] === undefined) !== (flags['tls-key'] === undefined)) {
    throw new UsageError('--tls-cert and --tls-key go together');
  }
  if (flags['ca-out'] !== undefined && flags.tls !== true && flags['tls-cert'] === undefined) {
    throw new UsageError('--ca-out needs --tls or --tls-cert/--tls-key');
  }
  // Numbers first: a typo in a flag is a usage error even when a file flag is also wrong.
  // Ranges are checked here too (not only by startSimulator) so a bad value is a usage error (exit 2).
  const numbers = {
    port: int(flags.port, '--port', 0, 65_535) ?? DEFAULT_SIMULATOR_PORT,
    accessTokenTtlSeconds: int(flags['access-ttl'], '--access-ttl', 1),
    refreshTokenTtlSeconds: int(flags['refresh-ttl'], '--refresh-ttl', 1),
    postbackDelayMs: int(flags['postback-delay'], '--postback-delay', 0) ?? null,
  };
  const logLevel = flags['log-level'] ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }
  const accounts = await accountsFrom(flags);
  const certPem = flags['tls-cert'] === undefined ? undefined : await readFile(flags['tls-cert'], 'utf8');
  const keyPem = flags['tls-key'] === undefined ? undefined : await readFile(flags['tls-key'], 'utf8');
  return {
    accounts,
    ...numbers,
    host: flags.host,
    publicBaseUrl: flags['public-base-url'],
    // A given certificate is what clients trust directly when no separate CA is involved.
    tls: certPem !== undefined && keyPem !== undefined ? { certPem, keyPem, caPem: certPem } : flags.tls === true,
    refreshTokenField: flags['refresh-token-field'],
    loginRevokesRefresh: flags['login-revokes-refresh'] === true,
    logger: createSimLogger(io.stdout, logLevel),
  };
}

async function accountsFrom(flags: Flags): Promise<SimulatorAccountInput[]> {
  const single = [
    'username',
    'password',
    'password-file',
    'public-key',
    'allow-ip',
    'webhook-url',
    'signed-postbacks',
  ].filter((name) => flags[name as keyof Flags] !== undefined);
  if (flags.config !== undefined) {
    if (single.length > 0) throw new UsageError(`--config cannot be combined with --${single.join(', --')}`);
    return readAccountsFile(flags.config);
  }
  if (flags.username === undefined || flags['public-key'] === undefined) {
    throw new UsageError('give --config FILE, or --username, --password (or --password-file) and --public-key');
  }
  if ((flags.password === undefined) === (flags['password-file'] === undefined)) {
    throw new UsageError('give exactly one of --password and --password-file');
  }
  const password = flags.password ?? (await readFile(flags['password-file'] ?? '', 'utf8')).replace(/\r?\n$/, '');
  return [
    {
      username: flags.username,
      password,
      publicKeyPem: await readFile(flags['public-key'], 'utf8'),
      allowIps: flags['allow-ip'],
      webhookUrl: flags['webhook-url'],
      signedPostbacks: flags['signed-postbacks'] === true,
    },
  ];
}

function int(value: string | undefined, flag: string, min: number, max = 999_999_999): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d{1,9}$/.test(value) || n < min || n > max) {
    throw new UsageError(`${flag} must be an integer from ${min} to ${max}, got "${value}"`);
  }
  return n;
}

function usage(io: SimulateIo, message: string): typeof EXIT.usage {
  io.stderr.write(`gateway-simulator: ${message}\nRun "gateway-simulator --help" for usage.\n`);
  return EXIT.usage;
}
