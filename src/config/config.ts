import type { MemoryBudget } from '../memory/budget.js';
import type { BaseAddress } from './base-url.js';
import type { ConfigWarning } from './config-warning.js';
import type { PostbackConfig } from './postback-settings.js';
import type { Environment, Settings } from './schema.js';
import type { Secret } from './secret.js';
import type { SignerConfig } from './signer-settings.js';
import type { StateConfig } from './state-settings.js';
import type { TracingConfig } from './tracing.js';
import type { UpstreamConfig } from './upstream-settings.js';

export type { ConfigWarning } from './config-warning.js';
export type { Environment } from './schema.js';
export type LogLevel = Settings['logLevel'];

/**
 * The validated settings, secrets loaded: a plain struct handed to app.ts (never read env vars elsewhere), composed
 * of the groups' configs. The settings used as they are keep the type the schema gives them (schema.ts); each
 * group's parser (`*-settings.ts`) derives its own config type from them.
 */
export interface Config {
  readonly base: BaseAddress;
  readonly environment: Environment;
  readonly username: string;
  readonly password: Secret;
  /** What holds the private key: a key file, or a PKCS#11 token (an HSM or a cloud KMS). */
  readonly signer: SignerConfig;
  /**
   * The password file the sidecar watches for rotation (secret-watch.ts), when set (the other files are their
   * groups': `upstream.caFile`, `postback.publicKeyFile`...), and how often every watched file is read
   * (SIDECAR_SECRET_POLL_INTERVAL_MS).
   */
  readonly secretFiles: {
    readonly password: string | undefined;
    readonly pollIntervalMs: Settings['secretPollIntervalMs'];
    /** contentDigest of each secret file's content as loaded, by path: the watcher's starting point. */
    readonly loadedDigests: Readonly<Record<string, string>>;
  };
  /** The egress listener; its allowed hosts lowercase, IPv6 addresses without brackets (listen-host.ts). */
  readonly listen: Settings['listen'];
  readonly admin: Settings['admin'];
  readonly upstream: UpstreamConfig;
  readonly signedRoutes: readonly string[];
  /** SIDECAR_LIMITS_FILE: the money limits' rules (src/limits/), read at start and whenever the file changes. */
  readonly limitsFile: string | undefined;
  /** Every client header sent on to the gateway, lowercase: the defaults and SIDECAR_FORWARD_REQUEST_HEADERS. */
  readonly forwardedRequestHeaders: readonly string[];
  readonly maxBodyBytes: Settings['maxBodyBytes'];
  /** The process's memory budget and its shares (docs/operations.md, "Memory"), read at start. */
  readonly memory: MemoryBudget;
  readonly token: Settings['token'];
  readonly clock: Settings['clock'];
  readonly shutdown: Settings['shutdown'];
  /** Idempotency-Key handling (docs/idempotency.md). */
  readonly idempotency: Settings['idempotency'];
  /** The postback receiver (docs/postbacks.md); undefined when SIDECAR_POSTBACK_FORWARD_URL is not set. */
  readonly postback: PostbackConfig | undefined;
  /** The shared state store (docs/fleet.md): memory, or Redis for a fleet. */
  readonly state: StateConfig;
  readonly tracing: TracingConfig;
  readonly logLevel: LogLevel;
  /** Allowed but risky settings (a non-loopback listen host): the caller logs each one at start. */
  readonly warnings: readonly ConfigWarning[];
}
