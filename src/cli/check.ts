import type { Config } from '../config/config.js';
import { MIB, type MemoryBudget } from '../memory/budget.js';
import { collectConfig } from '../config/load.js';
import { publicKeyFingerprint } from '../signing/keys.js';
import { CheckReport } from '../tools/check-report.js';
import { checkLimits } from '../tools/check-limits.js';
import { checkPkcs11 } from '../tools/check-pkcs11.js';
import { checkPostbacks } from '../tools/check-postbacks.js';
import { checkStateStore } from '../tools/check-state-store.js';
import { judgeSkew } from '../tools/clock-skew.js';
import { keyPermissions } from '../tools/key-permissions.js';
import { probeConnection, type ProbeResult } from '../tools/probe-connection.js';
import { probeTunnel } from '../tools/probe-tunnel.js';
import { probeLogin } from '../tools/probe-login.js';
import { parseCommandLine } from '../tools/usage.js';
import { EXIT, type Command } from '../tools/command.js';

const USAGE = 'usage: signing-sidecar check';
const HELP = `${USAGE}

Loads the same settings as \`serve\` (SIDECAR_* environment variables, SIDECAR_CONFIG_FILE) and checks, one
line each: the config (every refused setting, one line each), the private key (size, fingerprint, file mode; with
SIDECAR_SIGNER=pkcs11 the module, the token, the key's label, ID, size and mechanism, a test signature made by
the token and verified with its public key, and the PIN file's mode),
the connection to the base URL (TCP and TLS; with a forward proxy, the CONNECT tunnel first, on a line of its
own, and TLS to the gateway through it), a password login, this host's clock against the gateway's
Date header and, when the postback receiver is on, its public URL, keys, sources and whether the forward URL
can be reached (a connection only: no postback is sent), and with SIDECAR_STATE_STORE=redis, a PING to
Redis within SIDECAR_REDIS_COMMAND_TIMEOUT_MS and a read of one key under the prefix, and the money limits'
rules file (SIDECAR_LIMITS_FILE), with a warning when the memory store leaves each replica to count alone.
Marks: ✔ passed, ✘ failed, ! warning, - not checked. Never prints the password, tokens or key.

The login is a real password login: it invalidates access tokens issued before it (spec 4.1), so a running
sidecar for the same account fetches a new token on its next request (one 401 and a transparent retry).
A signed request is not tried: the only signed endpoints create deposits or withdrawals.

Exit codes: 0 nothing failed (warnings allowed), 1 a check failed, 2 bad usage.
`;

const NOT_CHECKED =
  'a signed request (there is no signed no-op: every signed endpoint creates a deposit or withdrawal), so ' +
  'whether the gateway holds the public key with the fingerprint above, and the IP allowlist of the signed ' +
  'endpoints, show on the first real request; compare your signer with `signing-sidecar sign` and `verify`';

async function loadOrReport(env: NodeJS.ProcessEnv, report: CheckReport): Promise<Config | undefined> {
  const loaded = await collectConfig(env);
  if (!loaded.ok) {
    // Every refused setting, one line each, so one run shows all there is to fix. ConfigError messages name the
    // setting and never carry secret values.
    for (const err of loaded.errors) report.line('✘', 'config', err.message);
    report.line('-', 'not checked', 'key, connection, login and clock: fix the config first');
    return undefined;
  }
  const { config } = loaded;
  report.line(
    '✔',
    'config',
    `valid (${config.environment}, base URL ${config.base.origin}${config.base.pathPrefix}, user ${config.username})`,
  );
  for (const warning of config.warnings) {
    // A key or PIN file's mode shows on its own permissions line below, judged by the same rule (file-mode.ts).
    if (warning.kind === 'file-mode') continue;
    report.line('!', 'config', `${warning.setting}: ${warning.message}`);
  }
  report.line('✔', 'memory', memoryLine(config.memory));
  return config;
}

/** The memory budget as `serve` will size itself (docs/operations.md, "Memory"), in MiB. */
function memoryLine(budget: MemoryBudget): string {
  const mib = (bytes: number) => Math.floor(bytes / MIB);
  const { shares } = budget;
  const shedAt =
    budget.source === 'heap' ? `${mib(budget.heapHighWaterBytes)} MiB of heap` : `${mib(budget.rssHighWaterBytes)} MiB`;
  return `limit ${mib(budget.limitBytes)} MiB (${budget.source}): store ${mib(shares.store)}, bodies ${mib(shares.bodies)}, headroom ${mib(shares.headroom)}, runtime ${mib(shares.runtime)}; sheds at ${shedAt}`;
}

async function checkGateway(config: Config, report: CheckReport): Promise<void> {
  const { proxy, ca, connectTimeoutMs } = config.upstream;
  let connection: ProbeResult;
  if (proxy === undefined) {
    connection = await probeConnection(config.base, ca, connectTimeoutMs);
  } else {
    // The forward proxy's verdict on its own line, so a refusal there is never read as the gateway's.
    const tunnel = await probeTunnel(config.base, proxy, ca, connectTimeoutMs);
    report.line(tunnel.proxy.mark, 'forward proxy', tunnel.proxy.detail);
    if (tunnel.gateway === undefined) {
      report.line('-', 'not checked', 'base URL, password login and clock skew: no tunnel through the forward proxy');
      return;
    }
    connection = tunnel.gateway;
  }
  report.line(connection.mark, 'base URL reachable', `${config.base.origin}: ${connection.detail}`);
  if (connection.mark === '✘') {
    report.line('-', 'not checked', 'password login and clock skew: the gateway is not reachable');
    return;
  }
  const login = await probeLogin(config);
  report.line(login.mark, 'password login', login.detail);
  // Unknown is not out of range: warn rather than fail, so a gateway without Date headers does not fail check.
  if (login.skew === undefined)
    report.line('!', 'clock skew', 'no Date header in the answer; skew unknown (check NTP on this host)');
  else {
    const skew = judgeSkew(login.skew);
    report.line(skew.mark, 'clock skew', skew.detail);
  }
}

export const check: Command = async (argv, io) => {
  const parsed = parseCommandLine(argv, {}, io, { usage: USAGE, help: HELP });
  if (typeof parsed === 'number') return parsed;
  const report = new CheckReport(io.stdout);
  const config = await loadOrReport(io.env, report);
  if (config === undefined) return EXIT.failed;
  if (config.signer.kind === 'pkcs11') {
    await checkPkcs11(config.signer, report);
    // The PIN file is judged as the key file is: with the token, whoever reads the PIN can sign payments.
    const perms = await keyPermissions(config.signer.pinFile);
    report.line(perms.mark, 'PIN file permissions', perms.detail);
  } else {
    const { privateKey, privateKeyFile } = config.signer;
    const bits = privateKey.asymmetricKeyDetails?.modulusLength ?? 0;
    report.line('✔', 'private key', `RSA ${bits} bits, public key fingerprint ${publicKeyFingerprint(privateKey)}`);
    const perms = await keyPermissions(privateKeyFile);
    report.line(perms.mark, 'key file permissions', perms.detail);
  }
  await checkGateway(config, report);
  await checkPostbacks(config.postback, report);
  await checkStateStore(config, report);
  checkLimits(config, report);
  report.line('-', 'not checked', NOT_CHECKED);
  io.stdout.write(report.failed ? 'result: FAILED\n' : 'result: ok\n');
  return report.failed ? EXIT.failed : EXIT.ok;
};
