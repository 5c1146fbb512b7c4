// Public options of the simulator and their defaults, as named constants in one place.
import type { Logger } from 'pino';
import type { SimulatorAccountInput } from './accounts.js';
import type { PostbackRetryOptions } from './postbacks.js';
import type { FinalStatus } from './transactions.js';

export const DEFAULT_HOST = '127.0.0.1';
export const DEFAULT_REFRESH_TOKEN_FIELD = 'refresh_token';

export interface SimulatorTlsOptions {
  readonly certPem: string;
  readonly keyPem: string;
  /** The PEM clients should trust, reported back as `caPem` (e.g. your own test CA). */
  readonly caPem?: string;
}

export interface SimulatorOptions {
  readonly accounts: readonly SimulatorAccountInput[];
  /** Listen address. Default 127.0.0.1. */
  readonly host?: string;
  /** Listen port; 0 (the default) picks a free one. */
  readonly port?: number;
  /**
   * The base address clients are configured with; the signed URL is rebuilt from it and the request target
   * as received. Default: the listen URL. May carry a path prefix ("https://gw.example/gw").
   */
  readonly publicBaseUrl?: string;
  /** Default 900 (15 min, spec 8). */
  readonly accessTokenTtlSeconds?: number;
  /** Default 28 800 (8 h, spec 8). */
  readonly refreshTokenTtlSeconds?: number;
  /**
   * A password login also invalidates every earlier refresh token of the account (and, as always, every earlier
   * access token): only the newest login's chain works. The spec does not say a gateway does not do this; replicas
   * that each log in on their own then log each other out. Default false.
   */
  readonly loginRevokesRefresh?: boolean;
  /** Name of the refresh grant's token field (not in the spec). Default "refresh_token". */
  readonly refreshTokenField?: string;
  /** Complete new transactions automatically after this delay; null/undefined: only via the control API. */
  readonly postbackDelayMs?: number | null;
  /** Final status used by the automatic completion. Default SUCCESS. */
  readonly autoCompleteStatus?: FinalStatus;
  readonly postbackRetry?: PostbackRetryOptions;
  /** The simulator's postback signing key (PKCS#8 or PKCS#1 PEM); a fresh 2048-bit key when absent. */
  readonly postbackPrivateKeyPem?: string;
  /** true: HTTPS with a generated throwaway CA and leaf; an object: HTTPS with your certificate. */
  readonly tls?: boolean | SimulatorTlsOptions;
  /** Request body cap. Default 1 MiB. */
  readonly maxBodyBytes?: number;
  /** Nonce replay window. Default 95 s (spec 8). */
  readonly nonceWindowSeconds?: number;
  /** A pino logger; default silent. */
  readonly logger?: Logger;
}

/** Throws a RangeError naming the option, so a bad test or CLI flag fails before anything listens. */
export function checkNumericOptions(options: SimulatorOptions): void {
  const positive = (name: string, value: number | undefined): void => {
    if (value !== undefined && (!Number.isFinite(value) || value <= 0)) {
      throw new RangeError(`${name} must be a positive number, got ${value}`);
    }
  };
  positive('accessTokenTtlSeconds', options.accessTokenTtlSeconds);
  positive('refreshTokenTtlSeconds', options.refreshTokenTtlSeconds);
  positive('maxBodyBytes', options.maxBodyBytes);
  positive('nonceWindowSeconds', options.nonceWindowSeconds);
  const delay = options.postbackDelayMs;
  if (delay !== undefined && delay !== null && (!Number.isFinite(delay) || delay < 0)) {
    throw new RangeError(`postbackDelayMs must be >= 0 or null, got ${delay}`);
  }
  const port = options.port;
  if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535)) {
    throw new RangeError(`port must be 0..65535, got ${port}`);
  }
}
