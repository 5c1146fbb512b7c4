import type { KeyObject } from 'node:crypto';
import type { BaseAddress } from './base-url.js';
import type { PostbackConfig } from './postback-settings.js';
import type { StateConfig } from './state-settings.js';
import type { Secret } from './secret.js';

export type Environment = 'staging' | 'production';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** A setting that is allowed but risky: logged at warn level when the sidecar starts, printed by `check`. */
export interface ConfigWarning {
  /** `ENV_VAR (file.key)`, as in ConfigError. */
  readonly setting: string;
  readonly message: string;
}

/** The validated settings, secrets loaded: a plain struct handed to app.ts (never read env vars elsewhere). */
export interface Config {
  readonly base: BaseAddress;
  readonly environment: Environment;
  readonly username: string;
  readonly password: Secret;
  readonly privateKey: KeyObject;
  readonly privateKeyFile: string;
  /**
   * The other secret files the sidecar watches for rotation (secret-watch.ts), when set, and how often their
   * content is read (SIDECAR_SECRET_POLL_INTERVAL_MS).
   */
  readonly secretFiles: {
    readonly password: string | undefined;
    readonly upstreamCa: string | undefined;
    readonly pollIntervalMs: number;
    /** contentDigest of each secret file's content as loaded, by path: the watcher's starting point. */
    readonly loadedDigests: Readonly<Record<string, string>>;
  };
  readonly listen: { readonly host: string; readonly port: number; readonly allowNonLoopback: boolean };
  readonly admin: { readonly host: string; readonly port: number; readonly readinessRequiresToken: boolean };
  readonly upstream: {
    /** PEM text of the extra CA bundle, if any. */
    readonly ca: string | undefined;
    readonly connectTimeoutMs: number;
    readonly responseTimeoutMs: number;
    readonly connectRetryDeadlineMs: number;
    readonly keepAliveTimeoutMs: number;
    readonly connections: number;
    /** Payload fields the gateway's answer must echo unchanged when it carries them (SIDECAR_ANSWER_CORRELATION_FIELDS). */
    readonly answerCorrelationFields: readonly string[];
  };
  readonly signedRoutes: readonly string[];
  readonly maxBodyBytes: number;
  readonly token: {
    readonly refreshTokenField: string;
    readonly refreshAheadMinSeconds: number;
    readonly refreshAheadMaxSeconds: number;
    readonly loginBackoffMaxMs: number;
  };
  readonly clock: { readonly skewCorrection: boolean; readonly maxCorrectionSeconds: number };
  readonly shutdown: { readonly drainDelayMs: number; readonly maxDelayMs: number; readonly quitEndpoint: boolean };
  /** Idempotency-Key handling (docs/idempotency.md). */
  readonly idempotency: { readonly required: boolean; readonly ttlSeconds: number };
  /** The postback receiver (docs/postbacks.md); undefined when SIDECAR_POSTBACK_FORWARD_URL is not set. */
  readonly postback: PostbackConfig | undefined;
  /** The shared state store (docs/fleet.md): memory, or Redis for a fleet. */
  readonly state: StateConfig;
  readonly logLevel: LogLevel;
  /** Allowed but risky settings (a non-loopback listen host): the caller logs each one at start. */
  readonly warnings: readonly ConfigWarning[];
}
