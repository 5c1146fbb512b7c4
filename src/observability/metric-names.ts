// The public metric contract. Alerts, dashboards and the deploy/ checks depend on these names,
// so they live in one place and change only on purpose (alerts and dashboards depend on them).
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
  /** gauge: generation of the fleet's shared token record this replica uses (0: none; memory store: stays 0). */
  tokenGeneration: 'signing_sidecar_token_generation',
  /** histogram: time a replica waited for another replica's refresh or login (the token lock) instead of calling. */
  tokenLockWaits: 'signing_sidecar_token_lock_wait_seconds',
  /** counter: token records written by another replica and taken into use here, without a gateway call. */
  tokenAdopted: 'signing_sidecar_token_adopted_total',
  /** counter: the state store was away when a token was needed: this replica got its own (login or refresh). */
  tokenStoreFallbacks: 'signing_sidecar_token_store_fallbacks_total',
  /** gauge: 1 while the shared state store answers (always 1 for the memory store), 0 while Redis is away. */
  stateStoreUp: 'signing_sidecar_state_store_up',
  /** histogram{command, outcome}: one state store command (STATE_STORE_COMMANDS x STATE_STORE_OUTCOMES). */
  stateStoreCommandDuration: 'signing_sidecar_state_store_command_duration_seconds',
  /**
   * counter: the Redis dataset found wiped (its epoch missing or replaced: a primary restarted empty, FLUSHALL);
   * idempotency keys, the token record and queued postbacks were lost (alert SigningSidecarStateStoreWiped).
   */
  stateStoreWipes: 'signing_sidecar_state_store_wipes_total',
  /** counter: live entries the memory store dropped to stay within SIDECAR_STATE_MEMORY_MAX_MB / _MAX_ENTRIES. */
  stateStoreEvictions: 'signing_sidecar_state_store_evictions_total',
  /** gauge: the memory store's entries as the heap holds them, approximately (0 with Redis). */
  stateStoreMemoryBytes: 'signing_sidecar_state_store_memory_bytes',
  /** gauge: SIDECAR_STATE_MEMORY_MAX_MB in bytes: past it the memory store evicts (0 with Redis). */
  stateStoreMemoryLimitBytes: 'signing_sidecar_state_store_memory_limit_bytes',
  /** gauge: the memory store's entries (0 with Redis). */
  stateStoreMemoryEntries: 'signing_sidecar_state_store_memory_entries',
  /** gauge: SIDECAR_STATE_MEMORY_MAX_ENTRIES: past it the memory store evicts (0 with Redis). */
  stateStoreMemoryLimitEntries: 'signing_sidecar_state_store_memory_limit_entries',
  /**
   * counter{kind}: records read from Redis and refused because their MAC is missing or wrong (state/record-mac.ts);
   * kind idempotency|postback. Created at zero.
   */
  stateRecordsRejected: 'signing_sidecar_state_records_rejected_total',
  /**
   * counter{cause_family, outcome}: failed sends to the gateway, each attempt (token calls and retries included);
   * cause_family proxy (the forward proxy)|gateway|sidecar (which hop failed), outcome not_sent|sent_no_answer. Created at zero.
   */
  upstreamFailures: 'signing_sidecar_upstream_failures_total',
  /** counter{reason}: resends; reason token_rejected|connect_failed. */
  retries: 'signing_sidecar_retries_total',
  /** histogram{signer}: time to compute one RSA signature (signer file|pkcs11; failures included). */
  signingDuration: 'signing_sidecar_signing_duration_seconds',
  /** counter{signer, outcome}: signatures asked of the signer; outcome success|failure, created at zero. */
  signatures: 'signing_sidecar_signatures_total',
  /** gauge{signer}: 1 while a signature can be made (the key file: always; PKCS#11: the token is open). */
  signerUp: 'signing_sidecar_signer_up',
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
  /**
   * counter{rule, mode}: payments a money limit refused (mode enforce: answered 403 sidecar.limit.exceeded, nothing
   * sent) or would have refused (mode report: sent). Created at zero for every rule of the limits file.
   */
  limitRefusals: 'signing_sidecar_limit_refusals_total',
  /**
   * gauge{rule, window}: how much of a limit's window is used, 0 to 1 (and past 1 in report mode), read from the store
   * at each scrape (the fleet's use on Redis; the busiest currency of a rule without one); window is the period as
   * written in the rules file (1h) or per_minute.
   */
  limitUseRatio: 'signing_sidecar_limit_use_ratio',
  /** counter{setting, outcome}: secret files read again; setting private_key|pkcs11_pin|password|upstream_ca|upstream_proxy_password|upstream_proxy_ca|postback_keys|postback_forward_secret|state_mac_keys|limits, outcome success|error. */
  configReloads: 'signing_sidecar_config_reloads_total',
  /** gauge{version, environment, key_fingerprint} = 1; one series, the key in use (replaced on a key rotation). */
  buildInfo: 'signing_sidecar_build_info',
  /** gauge: 1 when ready to serve (key loaded, valid token, not draining). */
  ready: 'signing_sidecar_ready',
  /** gauge: client requests in flight. */
  inFlight: 'signing_sidecar_in_flight_requests',
  /** counter{outcome}: postbacks received by the receiver (POSTBACK_OUTCOMES), created at zero. */
  postbacks: 'signing_sidecar_postbacks_total',
  /** histogram: one direct delivery of a verified postback to the application (answered, failed or timed out). */
  postbackForwardDuration: 'signing_sidecar_postback_forward_duration_seconds',
  /** counter{outcome}: queued delivery attempts by what became of them (DELIVERY_OUTCOMES), created at zero. */
  postbackDeliveries: 'signing_sidecar_postback_deliveries_total',
  /** counter: postbacks this replica accepted, appended to the inbox again after a wipe of Redis. */
  postbackRequeued: 'signing_sidecar_postback_requeued_total',
  /**
   * counter: accepted postbacks this replica stopped holding for a wipe (oldest first) to stay within
   * SIDECAR_POSTBACK_REQUEUE_MEMORY_MB: they are in Redis only.
   */
  postbackRequeueDropped: 'signing_sidecar_postback_requeue_memory_dropped_total',
  /** gauge: queued postbacks not yet delivered, dead letters excluded (the whole account's, from Redis). */
  postbackInboxUndelivered: 'signing_sidecar_postback_inbox_undelivered',
  /** gauge: age of the oldest undelivered queued postback, 0 when there is none. */
  postbackInboxOldestAge: 'signing_sidecar_postback_inbox_oldest_age_seconds',
  /** gauge: queued postbacks in the dead letters (every attempt failed), until replayed or dropped. */
  postbackDeadLetters: 'signing_sidecar_postback_dead_letters',
  /** counter{outcome}: signed requests by what their Idempotency-Key did (IDEMPOTENCY_OUTCOMES), created at zero. */
  idempotency: 'signing_sidecar_idempotency_total',
  /**
   * counter{listener, reason}: connections and requests the connection policy refused (inbound/connection-policy.ts);
   * listener egress|postback|admin, reason connections|per_source|pipelined|timeout|headers_too_large|malformed|idle.
   * Created at zero.
   */
  connectionsRefused: 'signing_sidecar_connections_refused_total',
  /** counter{listener}: requests refused past the memory high-water mark (memory/pressure.ts). Created at zero. */
  requestsShed: 'signing_sidecar_requests_shed_total',
  /** gauge{share}: the memory budget (limit) and its shares runtime|headroom|bodies|store, in bytes. */
  memoryBudgetBytes: 'signing_sidecar_memory_budget_bytes',
  /** gauge: max(RSS / limit, heap used / heap limit) at the last look; shedding starts at 0.9. */
  memoryPressureRatio: 'signing_sidecar_memory_pressure_ratio',
  /** gauge: 1 while the listeners shed new work. */
  memoryShedding: 'signing_sidecar_memory_shedding',
} as const;

/** Which hop a failed send belongs to (upstream/upstream-errors.ts, causeFamily): a label of upstreamFailures. */
export const CAUSE_FAMILIES = ['proxy', 'gateway', 'sidecar'] as const;
export type CauseFamily = (typeof CAUSE_FAMILIES)[number];

/**
 * What a request's Idempotency-Key did: new (claimed, sent), taken_over (claimed from a dead replica that had sent
 * nothing, sent), replayed (stored answer), in_progress (409),
 * key_reused (422), abandoned (a dead replica's record, past its deadline or `sending` with its lease run out, answered outcome_unknown), unavailable (503,
 * store unreachable), key_invalid (400), key_required (428), unverified (500: the record failed its MAC), claim_lost
 * (409 at the fence before sending: the claim was taken over while this replica was paused or cut off; also counted
 * as the `new` it was claimed as).
 */
export const IDEMPOTENCY_OUTCOMES = [
  'new',
  'taken_over',
  'replayed',
  'in_progress',
  'key_reused',
  'abandoned',
  'unavailable',
  'key_invalid',
  'key_required',
  'unverified',
  'claim_lost',
] as const;
export type IdempotencyOutcome = (typeof IDEMPOTENCY_OUTCOMES)[number];

/**
 * What became of a postback (docs/postbacks.md): forwarded (delivered: the application answered 2xx), accepted
 * (queued: kept in the inbox), duplicate (delivered or kept before: 200 without a delivery), the refusals
 * (signature_invalid, signature_missing, timestamp_expired, timestamp_future, source_forbidden, body_invalid,
 * not_found, method_not_allowed, too_large) and the 503s that ask for a redelivery (forward_failed: the delivery
 * failed, in_flight, store_unavailable, busy: the large-body budget is full, overloaded: past the memory high-water
 * mark); error is an unexpected failure (500).
 */
export const POSTBACK_OUTCOMES = [
  'forwarded',
  'accepted',
  'duplicate',
  'signature_invalid',
  'signature_missing',
  'timestamp_expired',
  'timestamp_future',
  'source_forbidden',
  'body_invalid',
  'forward_failed',
  'in_flight',
  'store_unavailable',
  'not_found',
  'method_not_allowed',
  'too_large',
  'busy',
  'overloaded',
  'error',
] as const;
export type PostbackOutcome = (typeof POSTBACK_OUTCOMES)[number];

/**
 * What became of one queued delivery attempt (docs/postbacks.md): delivered (2xx), retry (kept for a later
 * attempt), dead_letter (it was the last), not_recorded (Redis did not take the outcome: delivered again later).
 */
export const DELIVERY_OUTCOMES = ['delivered', 'retry', 'dead_letter', 'not_recorded'] as const;
export type DeliveryOutcomeLabel = (typeof DELIVERY_OUTCOMES)[number];

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
