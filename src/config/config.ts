import type { BaseAddress } from './base-url.js';
import type { PostbackConfig } from './postback-settings.js';
import type { UpstreamProxyConfig } from './proxy-settings.js';
import type { StateConfig } from './state-settings.js';
import type { Settings } from './schema.js';
import type { Secret } from './secret.js';
import type { SignerConfig } from './signer-settings.js';

export type Environment = 'staging' | 'production';
export type LogLevel = Settings['logLevel'];

/** A setting that is allowed but risky: logged at warn level when the sidecar starts, printed by `check`. */
export interface ConfigWarning {
  /** `ENV_VAR (file.key)`, as in ConfigError. */
  readonly setting: string;
  readonly message: string;
}

/**
 * The validated settings, secrets loaded: a plain struct handed to app.ts (never read env vars elsewhere). The
 * settings used as they are keep the type the schema gives them (schema.ts); the others are parsed, loaded or
 * checked by load.ts into a richer shape.
 */
export interface Config {
  readonly base: BaseAddress;
  readonly environment: Environment;
  readonly username: string;
  readonly password: Secret;
  /** What holds the private key: a key file, or a PKCS#11 token (an HSM or a cloud KMS). */
  readonly signer: SignerConfig;
  /**
   * The other secret files the sidecar watches for rotation (secret-watch.ts), when set, and how often their
   * content is read (SIDECAR_SECRET_POLL_INTERVAL_MS).
   */
  readonly secretFiles: {
    readonly password: string | undefined;
    readonly upstreamCa: string | undefined;
    readonly pollIntervalMs: Settings['secretPollIntervalMs'];
    /** contentDigest of each secret file's content as loaded, by path: the watcher's starting point. */
    readonly loadedDigests: Readonly<Record<string, string>>;
  };
  readonly listen: Readonly<Omit<Settings['listen'], 'allowedHosts'>> & {
    /** SIDECAR_LISTEN_ALLOWED_HOSTS: lowercase, IPv6 addresses without brackets (listen-host.ts). */
    readonly allowedHosts: readonly string[];
  };
  readonly admin: Readonly<Settings['admin']>;
  readonly upstream: Readonly<Omit<Settings['upstream'], 'caFile' | 'answerCorrelationFields' | 'proxy'>> & {
    /** PEM text of the extra CA bundle, if any. */
    readonly ca: string | undefined;
    /** Payload fields the gateway's answer must echo unchanged when it carries them, empty items dropped. */
    readonly answerCorrelationFields: readonly string[];
    /** The forward proxy the gateway is reached through; undefined: directly. */
    readonly proxy: UpstreamProxyConfig | undefined;
  };
  readonly signedRoutes: readonly string[];
  /** Every client header sent on to the gateway, lowercase: the defaults and SIDECAR_FORWARD_REQUEST_HEADERS. */
  readonly forwardedRequestHeaders: readonly string[];
  readonly maxBodyBytes: Settings['maxBodyBytes'];
  readonly token: Readonly<Settings['token']>;
  readonly clock: Readonly<Settings['clock']>;
  readonly shutdown: Readonly<Settings['shutdown']>;
  /** Idempotency-Key handling (docs/idempotency.md). */
  readonly idempotency: Readonly<Settings['idempotency']>;
  /** The postback receiver (docs/postbacks.md); undefined when SIDECAR_POSTBACK_FORWARD_URL is not set. */
  readonly postback: PostbackConfig | undefined;
  /** The shared state store (docs/fleet.md): memory, or Redis for a fleet. */
  readonly state: StateConfig;
  /**
   * Traces (docs/operations.md#tracing). `enabled`: the OpenTelemetry SDK's environment asks for them (an OTLP
   * endpoint set, OTEL_SDK_DISABLED not true); the SDK reads the rest of its OTEL_* settings itself.
   */
  readonly tracing: Readonly<Settings['tracing']> & { readonly enabled: boolean };
  readonly logLevel: Settings['logLevel'];
  /** Allowed but risky settings (a non-loopback listen host): the caller logs each one at start. */
  readonly warnings: readonly ConfigWarning[];
}
