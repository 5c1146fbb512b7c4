import type { KeyObject } from 'node:crypto';
import type { BaseAddress } from './base-url.js';
import type { Secret } from './secret.js';

export type Environment = 'staging' | 'production';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** The validated settings, secrets loaded: a plain struct handed to app.ts (never read env vars elsewhere). */
export interface Config {
  readonly base: BaseAddress;
  readonly environment: Environment;
  readonly username: string;
  readonly password: Secret;
  readonly privateKey: KeyObject;
  readonly privateKeyFile: string;
  readonly listen: { readonly host: string; readonly port: number };
  readonly admin: { readonly host: string; readonly port: number };
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
  readonly shutdown: { readonly drainDelayMs: number; readonly maxDelayMs: number; readonly quitEndpoint: boolean };
  readonly logLevel: LogLevel;
}
