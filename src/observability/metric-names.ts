// The public metric contract. Alerts, dashboards and the deploy/ checks depend on these names,
// so they live in one place and change only on purpose (DESIGN.md: "keep them stable").
export const METRIC_PREFIX = 'signing_sidecar_';

export const METRICS = {
  /** counter{route, status_class, code}: every client request answered; code is "ok", a sidecar.* code or a gateway code. */
  requests: 'signing_sidecar_requests_total',
  /** counter{code}: gateway error codes (GATEWAY_ERROR_CODES), created at zero. */
  gatewayErrors: 'signing_sidecar_gateway_errors_total',
  /** counter: gateway answers refused because a correlation field differed from the request's (a stray answer). */
  answerMismatches: 'signing_sidecar_answer_mismatches_total',
  /** counter{grant, outcome}: token endpoint calls; grant password|refresh_token, outcome success|rejected|error. */
  tokenRequests: 'signing_sidecar_token_requests_total',
  /** gauge: Unix time (s) at which the current access token expires (0 when none). */
  accessTokenExpiry: 'signing_sidecar_access_token_expiry_timestamp_seconds',
  /** gauge: Unix time (s) at which the current refresh token expires (0 when none). */
  refreshTokenExpiry: 'signing_sidecar_refresh_token_expiry_timestamp_seconds',
  /** counter{reason}: resends; reason token_rejected|connect_failed. */
  retries: 'signing_sidecar_retries_total',
  /** histogram: time to compute one RSA signature. */
  signingDuration: 'signing_sidecar_signing_duration_seconds',
  /** histogram{route}: one gateway round trip (one attempt). */
  gatewayDuration: 'signing_sidecar_gateway_request_duration_seconds',
  /** histogram{route}: whole client request, from first byte in to last byte out. */
  requestDuration: 'signing_sidecar_request_duration_seconds',
  /** gauge: gateway Date header minus local clock, seconds (positive: gateway ahead). */
  clockSkew: 'signing_sidecar_gateway_clock_skew_seconds',
  /** gauge: seconds added to the local clock for X-Timestamp (SIDECAR_CLOCK_SKEW_CORRECTION; 0 when off). */
  clockCorrection: 'signing_sidecar_clock_correction_seconds',
  /** counter: measured offsets beyond SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS, not applied. */
  clockCorrectionsRefused: 'signing_sidecar_clock_corrections_refused_total',
  /** counter{setting, outcome}: secret files read again; setting private_key|password|upstream_ca, outcome success|error. */
  configReloads: 'signing_sidecar_config_reloads_total',
  /** gauge{version, environment, key_fingerprint} = 1; one series, the key in use (replaced on a key rotation). */
  buildInfo: 'signing_sidecar_build_info',
  /** gauge: 1 when ready to serve (key loaded, valid token, not draining). */
  ready: 'signing_sidecar_ready',
  /** gauge: client requests in flight. */
  inFlight: 'signing_sidecar_in_flight_requests',
} as const;

/** Bounded label set for gateway error codes: anything else is counted as "other". */
export const GATEWAY_ERROR_CODES = [
  'FAILED',
  'signature.verify.failed',
  'signature.timestamp.expired',
  'signature.timestamp.future',
  'signature.nonce.replayed',
  'ip.forbidden',
  'other',
] as const;
export type GatewayErrorCode = (typeof GATEWAY_ERROR_CODES)[number];
