import convict from 'convict';
import { FORMATS, type SettingFormat } from './formats.js';

// Every setting of the sidecar, declared once: its env var (SIDECAR_*), its key in the optional config file, its
// format, default and documentation. The types of the settings derive from this object (Settings below), load.ts
// validates them with convict, and docs/configuration.md is generated from the `doc` texts
// (`npm run docs:config`; a test fails when the committed file is stale). Precedence: defaults < file < env.
// A `doc` is Markdown, written for that reference; its links are relative to docs/.

/** One setting, as convict reads it, plus what only the reference shows. */
export interface Setting {
  readonly doc: string;
  readonly env: string;
  readonly format: SettingFormat;
  readonly default: unknown;
  /** Kept out of convict's dumps and out of refusals. */
  readonly sensitive?: true;
  /** What the reference shows instead of the default when the default means "not set" ("off", "none"). */
  readonly whenUnset?: string;
  /** Empty (or blank) is refused, "is required"; the reference shows `required`. */
  readonly required?: true;
}

/** The env var that names the config file: read by load.ts itself, not a setting of the file. */
export const CONFIG_FILE_ENV = {
  env: 'SIDECAR_CONFIG_FILE',
  doc: 'optional config file (JSON or YAML)',
  whenUnset: 'none',
} as const;

export const ENVIRONMENTS = ['staging', 'production'] as const;
export type Environment = (typeof ENVIRONMENTS)[number];
export const SIGNERS = ['file', 'pkcs11'] as const;
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export const STATE_STORES = ['memory', 'redis'] as const;
export const REDIS_MODES = ['standalone', 'sentinel', 'cluster'] as const;
export const POSTBACK_DELIVERIES = ['auto', 'direct', 'queued'] as const;
export const POSTBACK_FORWARD_SIGNINGS = ['auto', 'off'] as const;
/** About three days of attempts: a merchant's application down over a weekend still gets every postback. */
export const DEFAULT_POSTBACK_RETRY_SCHEDULE = [
  '0s',
  '5s',
  '5m',
  '30m',
  '2h',
  '5h',
  '10h',
  '10h',
  '10h',
  '10h',
  '10h',
  '10h',
  '5h',
];

export const SETTINGS = {
  baseUrl: {
    doc: 'Gateway base address, for signing and sending ([rules](#base-address)).',
    format: 'text',
    default: '',
    env: 'SIDECAR_BASE_URL',
    required: true,
  },
  environment: {
    doc: '`staging` or `production` (which requires `https://`).',
    format: [...ENVIRONMENTS],
    default: '' as Environment | '',
    env: 'SIDECAR_ENVIRONMENT',
    required: true,
  },
  username: {
    doc: 'Vendor account email.',
    format: 'text',
    default: '',
    env: 'SIDECAR_USERNAME',
    required: true,
  },
  passwordFile: {
    doc: 'Account password file; preferred.',
    format: 'file-path',
    default: '',
    env: 'SIDECAR_PASSWORD_FILE',
    whenUnset: 'exactly one of the two',
  },
  password: {
    doc: 'The password itself (masked in any settings dump).',
    format: 'text',
    default: '',
    env: 'SIDECAR_PASSWORD',
    sensitive: true,
    whenUnset: 'exactly one of the two',
  },
  signer: {
    doc: "`file` (the key file below) or `pkcs11` (an HSM or cloud KMS: [PKCS#11](operations.md#the-private-key-in-an-hsm-or-a-cloud-kms)); the other signer's settings are refused.",
    format: [...SIGNERS],
    default: 'file' as (typeof SIGNERS)[number],
    env: 'SIDECAR_SIGNER',
  },
  privateKeyFile: {
    doc: '`file`: unencrypted PEM RSA key ([rules](#private-key-and-password-files)).',
    format: 'file-path',
    default: '',
    env: 'SIDECAR_PRIVATE_KEY_FILE',
    whenUnset: 'required for `file`',
  },
  // The PKCS#11 signer (docs/operations.md#the-private-key-in-an-hsm-or-a-cloud-kms): SIDECAR_SIGNER=pkcs11 only.
  pkcs11: {
    module: {
      doc: 'Path of the PKCS#11 library (`.so`) of the HSM or KMS.',
      format: 'file-path',
      default: '',
      env: 'SIDECAR_PKCS11_MODULE',
      whenUnset: 'required for `pkcs11`',
    },
    tokenLabel: {
      doc: 'Label of the token holding the key; or the slot below.',
      format: 'text',
      default: '',
      env: 'SIDECAR_PKCS11_TOKEN_LABEL',
      whenUnset: 'one of the two for `pkcs11`',
    },
    slot: {
      doc: 'Slot ID of the token (decimal), when it has no usable label.',
      format: 'text',
      default: '',
      env: 'SIDECAR_PKCS11_SLOT',
      whenUnset: 'one of the two for `pkcs11`',
    },
    keyLabel: {
      doc: '`CKA_LABEL` of the private key; with the ID, both must match.',
      format: 'text',
      default: '',
      env: 'SIDECAR_PKCS11_KEY_LABEL',
      whenUnset: 'this, the ID or both for `pkcs11`',
    },
    keyId: {
      doc: '`CKA_ID` of the private key, hex.',
      format: 'text',
      default: '',
      env: 'SIDECAR_PKCS11_KEY_ID',
      whenUnset: 'this, the label or both for `pkcs11`',
    },
    pinFile: {
      doc: "The token user's PIN file; [re-read](#secret-rotation): the next session opens with it.",
      format: 'file-path',
      default: '',
      env: 'SIDECAR_PKCS11_PIN_FILE',
      whenUnset: 'required for `pkcs11`',
    },
    sessions: {
      doc: 'Signatures at once (a pool of sessions); `auto`: the signing threads (`UV_THREADPOOL_SIZE`, 4).',
      format: 'auto-or-whole-number',
      default: 'auto' as number | 'auto',
      env: 'SIDECAR_PKCS11_SESSIONS',
    },
    publicKeyFile: {
      doc: "PEM public key the token's key must match (the one the gateway holds); checked at start.",
      format: 'file-path',
      default: '',
      env: 'SIDECAR_PUBLIC_KEY_FILE',
      whenUnset: 'not checked',
    },
  },
  listen: {
    host: {
      doc: 'Egress listener host; loopback only unless allowed ([listen host](#listen-host)).',
      format: 'text',
      default: '127.0.0.1',
      env: 'SIDECAR_LISTEN_HOST',
    },
    port: { doc: 'Egress listener port (0: any free).', format: 'tcp-port', default: 8080, env: 'SIDECAR_LISTEN_PORT' },
    allowNonLoopback: {
      doc: 'Allow a non-loopback egress listener host (warned; [listen host](#listen-host)).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_LISTEN_ALLOW_NON_LOOPBACK',
    },
    allowedHosts: {
      doc: 'More names callers may put in `Host`, besides `localhost` and loopback addresses ([listen host](#listen-host)).',
      format: 'text-list',
      default: [] as string[],
      env: 'SIDECAR_LISTEN_ALLOWED_HOSTS',
      whenUnset: 'none',
    },
  },
  admin: {
    host: {
      doc: 'Metrics and health host.',
      format: 'text',
      default: '0.0.0.0',
      env: 'SIDECAR_ADMIN_HOST',
    },
    port: {
      doc: 'Metrics and health port (0: any free).',
      format: 'tcp-port',
      default: 9464,
      env: 'SIDECAR_ADMIN_PORT',
    },
    readinessRequiresToken: {
      doc: '`/readyz` also needs a valid token ([why off](operations.md#readiness-and-the-access-token)).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_READINESS_REQUIRES_TOKEN',
    },
  },
  upstream: {
    caFile: {
      doc: 'Extra PEM CAs for the gateway, beside the system roots.',
      format: 'file-path',
      default: '',
      env: 'SIDECAR_UPSTREAM_CA_FILE',
    },
    connectTimeoutMs: {
      doc: 'To open a gateway connection (TCP + TLS); also the longest wait for a free one.',
      format: 'positive-int',
      default: 5_000,
      env: 'SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS',
    },
    responseTimeoutMs: {
      doc: "For the gateway's whole answer once sent.",
      format: 'positive-int',
      default: 30_000,
      env: 'SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS',
    },
    connectRetryDeadlineMs: {
      doc: 'Retrying connection failures (nothing sent), then `unreachable`.',
      format: 'positive-int',
      default: 10_000,
      env: 'SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS',
    },
    keepAliveTimeoutMs: {
      doc: 'Idle gateway connection closes after this (and below its `Keep-Alive` hint).',
      format: 'positive-int',
      default: 4_000,
      env: 'SIDECAR_UPSTREAM_KEEPALIVE_TIMEOUT_MS',
    },
    answerCorrelationFields: {
      doc: 'Fields an answer must echo if present, else `outcome_unknown` ([answer correlation](#answer-correlation)); empty: off.',
      format: 'text-list',
      default: ['invoice_no'],
      env: 'SIDECAR_ANSWER_CORRELATION_FIELDS',
    },
    connections: {
      doc: 'Most gateway connections.',
      format: 'positive-int',
      default: 64,
      env: 'SIDECAR_UPSTREAM_CONNECTIONS',
    },
    proxy: {
      url: {
        doc: '`http(s)://host:port`, no credentials: `CONNECT` tunnels to the gateway ([forward proxy](operations.md#egress-through-a-forward-proxy)); not with `..._FROM_ENV`.',
        format: 'text',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_URL',
        whenUnset: 'none: direct',
      },
      fromEnv: {
        doc: 'Forward proxy from `HTTPS_PROXY` (`http://` base: `HTTP_PROXY`; lowercase first) unless `NO_PROXY` covers the gateway; read at start.',
        format: 'strict-boolean',
        default: false,
        env: 'SIDECAR_UPSTREAM_PROXY_FROM_ENV',
      },
      username: {
        doc: 'Forward proxy Basic auth user; needs the password file.',
        format: 'text',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_USERNAME',
        whenUnset: 'none: no forward proxy authentication',
      },
      passwordFile: {
        doc: 'Forward proxy password file; [re-read](#secret-rotation) for new tunnels.',
        format: 'file-path',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE',
      },
      caFile: {
        doc: 'Extra PEM CAs for an `https://` forward proxy (never the gateway); re-read.',
        format: 'file-path',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_CA_FILE',
      },
    },
  },
  signedRoutes: {
    doc: 'Paths below the base address signed (POST only): `/…`, no `?` or `#`; at least one.',
    format: 'text-list',
    default: ['/api/v2/transaction/init', '/api/v2/transfer-out/init'],
    env: 'SIDECAR_SIGNED_ROUTES',
  },
  limitsFile: {
    doc: 'Money limits on what leaves, YAML or JSON, re-read like the secret files ([limits](limits.md)).',
    format: 'file-path',
    default: '',
    env: 'SIDECAR_LIMITS_FILE',
    whenUnset: 'no limits',
  },
  forwardRequestHeaders: {
    doc: 'More client headers sent on to the gateway, besides `Accept`, `Accept-Language`, `User-Agent`, `X-Request-Id` ([forwarded headers](#forwarded-headers)).',
    format: 'text-list',
    default: [] as string[],
    env: 'SIDECAR_FORWARD_REQUEST_HEADERS',
    whenUnset: 'none',
  },
  maxBodyBytes: {
    doc: 'Largest client body, bytes.',
    format: 'positive-int',
    default: 1_048_576,
    env: 'SIDECAR_MAX_BODY_BYTES',
  },
  memoryLimitMb: {
    doc: "The process's [memory budget](operations.md#memory), MiB; `auto`: the container's limit (cgroup), else derived from node's heap.",
    format: 'auto-or-positive-int',
    default: 'auto' as number | 'auto',
    env: 'SIDECAR_MEMORY_LIMIT_MB',
  },
  clock: {
    skewCorrection: {
      doc: "Sign with local time + the gateway's `Date` offset ([runbook](runbooks.md#runbook-clock-skew)).",
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_CLOCK_SKEW_CORRECTION',
    },
    maxCorrectionSeconds: {
      doc: 'Largest correction; an offset beyond it is refused (counted), the correction stays.',
      format: 'positive-int',
      default: 30,
      env: 'SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS',
    },
  },
  secretPollIntervalMs: {
    doc: 'Secret files re-read interval ([rotation](#secret-rotation)).',
    format: 'positive-int',
    default: 1000,
    env: 'SIDECAR_SECRET_POLL_INTERVAL_MS',
  },
  token: {
    refreshTokenField: {
      doc: "Refresh grant's token field (unnamed in the spec; OAuth 2.0's).",
      format: 'text',
      default: 'refresh_token',
      env: 'SIDECAR_TOKEN_REFRESH_FIELD',
    },
    refreshAheadMinSeconds: {
      doc: 'Refresh at least this long before expiry; <= the maximum.',
      format: 'positive-int',
      default: 60,
      env: 'SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS',
    },
    refreshAheadMaxSeconds: {
      doc: 'Refresh at most this long before expiry (jittered).',
      format: 'positive-int',
      default: 120,
      env: 'SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS',
    },
    loginBackoffMaxMs: {
      doc: 'Cap of the backoff between failed logins.',
      format: 'positive-int',
      default: 30_000,
      env: 'SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS',
    },
  },
  shutdown: {
    drainDelayMs: {
      doc: 'After SIGTERM, serve new requests this long, not ready, so endpoints drain.',
      format: 'whole-number',
      default: 5_000,
      env: 'SIDECAR_SHUTDOWN_DRAIN_DELAY_MS',
    },
    maxDelayMs: {
      doc: 'Then wait this long at most for requests in flight.',
      format: 'positive-int',
      default: 30_000,
      env: 'SIDECAR_SHUTDOWN_MAX_DELAY_MS',
    },
    quitEndpoint: {
      doc: 'Loopback-only `POST /quitquitquit` on the admin port.',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_QUIT_ENDPOINT',
    },
  },
  idempotency: {
    required: {
      doc: 'Refuse signed requests without [`Idempotency-Key`](idempotency.md) (428).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_IDEMPOTENCY_REQUIRED',
    },
    ttlSeconds: {
      doc: "How long a key's answer is [kept](idempotency.md#how-long-keys-are-kept).",
      format: 'positive-int',
      default: 86_400,
      env: 'SIDECAR_IDEMPOTENCY_TTL_SECONDS',
    },
    leaseMs: {
      doc: "How long a key's claim outlives its replica's last renewal (renewed every third); then a retry [takes it over](idempotency.md#when-a-replica-dies-mid-request). Redis: >= 2 x `SIDECAR_REDIS_COMMAND_TIMEOUT_MS`.",
      format: 'positive-int',
      default: 5_000,
      env: 'SIDECAR_IDEMPOTENCY_LEASE_MS',
    },
  },
  // The postback receiver (docs/postbacks.md): off unless forwardUrl is set.
  postback: {
    forwardUrl: {
      doc: '`http(s)` URL for verified postbacks; turns the [receiver](postbacks.md) on.',
      format: 'text',
      default: '',
      env: 'SIDECAR_POSTBACK_FORWARD_URL',
      whenUnset: 'off',
    },
    listen: {
      host: {
        doc: 'Receiver host (reached through Service/Ingress).',
        format: 'text',
        default: '0.0.0.0',
        env: 'SIDECAR_POSTBACK_LISTEN_HOST',
      },
      port: {
        doc: 'Receiver port (0: any free), not the egress or admin port.',
        format: 'tcp-port',
        default: 8081,
        env: 'SIDECAR_POSTBACK_LISTEN_PORT',
      },
    },
    publicUrl: {
      doc: 'Webhook URL as registered: signed; its path the one route.',
      format: 'text',
      default: '',
      env: 'SIDECAR_POSTBACK_PUBLIC_URL',
      whenUnset: 'required when on',
    },
    publicKeyFile: {
      doc: "Gateway's PEM RSA key(s), >= 2048 bits; several in a rotation; re-read.",
      format: 'file-path',
      default: '',
      env: 'SIDECAR_POSTBACK_PUBLIC_KEY_FILE',
      whenUnset: 'required unless unsigned are accepted',
    },
    acceptUnsigned: {
      doc: 'Accept unsigned postbacks; needs `SIDECAR_POSTBACK_ALLOW_CIDRS`.',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_POSTBACK_ACCEPT_UNSIGNED',
    },
    allowCidrs: {
      doc: 'Addresses or CIDRs allowed, checked first, against the TCP peer.',
      format: 'text-list',
      default: [] as string[],
      env: 'SIDECAR_POSTBACK_ALLOW_CIDRS',
      whenUnset: 'any',
    },
    forwardSecretFile: {
      doc: '`whsec_` secret: [signs](postbacks.md#signed-for-the-application) what the application gets; re-read.',
      format: 'file-path',
      default: '',
      env: 'SIDECAR_POSTBACK_FORWARD_SECRET_FILE',
      whenUnset: 'required in production',
    },
    forwardSigning: {
      doc: '`off`: deliver unsigned even in production (warned at start).',
      format: [...POSTBACK_FORWARD_SIGNINGS],
      default: 'auto' as (typeof POSTBACK_FORWARD_SIGNINGS)[number],
      env: 'SIDECAR_POSTBACK_FORWARD_SIGNING',
    },
    forwardTimeoutMs: {
      doc: "For the application's answer; past it, `forward_failed`.",
      format: 'positive-int',
      default: 10_000,
      env: 'SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS',
    },
    maxAgeSeconds: {
      doc: '`X-Timestamp` further behind: `postback.timestamp.expired`.',
      format: 'positive-int',
      default: 60,
      env: 'SIDECAR_POSTBACK_MAX_AGE_SECONDS',
    },
    maxFutureSeconds: {
      doc: '`X-Timestamp` further ahead: `postback.timestamp.future`.',
      format: 'whole-number',
      default: 5,
      env: 'SIDECAR_POSTBACK_MAX_FUTURE_SECONDS',
    },
    deliveredTtlSeconds: {
      doc: "Delivered payloads' digests kept: a redelivery gets 200, not delivered again.",
      format: 'positive-int',
      default: 86_400,
      env: 'SIDECAR_POSTBACK_DELIVERED_TTL_SECONDS',
    },
    maxConnections: {
      doc: 'Most receiver connections; more are refused.',
      format: 'positive-int',
      default: 256,
      env: 'SIDECAR_POSTBACK_MAX_CONNECTIONS',
    },
    delivery: {
      doc: 'What the 200 to the gateway means ([delivery modes](postbacks.md#queued-delivery)).',
      format: [...POSTBACK_DELIVERIES],
      default: 'auto' as (typeof POSTBACK_DELIVERIES)[number],
      env: 'SIDECAR_POSTBACK_DELIVERY',
    },
    orderField: {
      doc: "`queued`: top-level field naming the transaction, whose postbacks go in arrival order (the simulator's).",
      format: 'text',
      default: 'transaction_id',
      env: 'SIDECAR_POSTBACK_ORDER_FIELD',
    },
    deliveryConcurrency: {
      doc: '`queued`: deliveries at once per replica.',
      format: 'positive-int',
      default: 4,
      env: 'SIDECAR_POSTBACK_DELIVERY_CONCURRENCY',
    },
    retrySchedule: {
      doc: '`queued`: delay before each attempt (`ms`, `s`, `m`, `h`, `d`; ±10 %); then a dead letter.',
      format: 'text-list',
      default: DEFAULT_POSTBACK_RETRY_SCHEDULE,
      env: 'SIDECAR_POSTBACK_RETRY_SCHEDULE',
    },
    visibilityTimeoutMs: {
      doc: '`queued`: unfinished this long, another replica takes it.',
      format: 'positive-int',
      default: 60_000,
      env: 'SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS',
    },
    requeueMemoryMb: {
      doc: '`queued`: MB of accepted postbacks held until delivered, [queued again](fleet.md#a-redis-that-comes-back-empty) after a wipe; 0: off.',
      format: 'whole-number',
      default: 32,
      env: 'SIDECAR_POSTBACK_REQUEUE_MEMORY_MB',
    },
  },
  // The shared state (docs/fleet.md): the token record, postback nonces, idempotency keys.
  state: {
    store: {
      doc: '`memory` (one pod) or `redis` ([fleet](fleet.md)).',
      format: [...STATE_STORES],
      default: 'memory' as (typeof STATE_STORES)[number],
      env: 'SIDECAR_STATE_STORE',
    },
    memoryMaxEntries: {
      doc: 'Memory store entries; past it the oldest settled go (counted).',
      format: 'positive-int',
      // The memory store's own default (DEFAULT_MEMORY_STORE_MAX_ENTRIES) has the same value.
      default: 200_000,
      env: 'SIDECAR_STATE_MEMORY_MAX_ENTRIES',
    },
    macKeyFile: {
      doc: '`redis`: [MAC keys](security.md#records-in-redis) of every record in Redis, base64, >= 32 bytes, one a line (the first signs); [re-read](fleet.md#rotating-the-mac-key).',
      format: 'file-path',
      default: '',
      env: 'SIDECAR_STATE_MAC_KEY_FILE',
      whenUnset: 'required in production with `redis`',
    },
    acceptUnsignedRecords: {
      doc: '`redis`: read records without a MAC: with no key file the MAC is off, with one a [rollout](fleet.md#turning-the-mac-on).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS',
    },
    memoryMaxMb: {
      doc: 'Memory store budget, MiB; `auto`: its share of the [memory budget](operations.md#memory). Past it the oldest settled go ([limits](idempotency.md#the-memory-stores-limits)).',
      format: 'auto-or-positive-int',
      default: 'auto' as number | 'auto',
      env: 'SIDECAR_STATE_MEMORY_MAX_MB',
    },
    redis: {
      mode: {
        doc: 'How Redis is found ([topologies](fleet.md#redis-topologies)).',
        format: [...REDIS_MODES],
        default: 'standalone' as (typeof REDIS_MODES)[number],
        env: 'SIDECAR_REDIS_MODE',
      },
      url: {
        doc: '`redis://host:6379` or `rediss://` (TLS), optional `/<database>`, no credentials.',
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_URL',
        sensitive: true,
        whenUnset: 'required for `standalone`',
      },
      sentinels: {
        doc: 'Sentinels, `host:port` (one answering suffices).',
        format: 'text-list',
        default: [] as string[],
        env: 'SIDECAR_REDIS_SENTINELS',
        whenUnset: 'required for `sentinel`',
      },
      sentinelMaster: {
        doc: "Primary's name (`sentinel monitor <name>`; often `mymaster`).",
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_SENTINEL_MASTER',
        whenUnset: 'required for `sentinel`',
      },
      sentinelUsername: {
        doc: "Sentinels' ACL user; needs their password file.",
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_SENTINEL_USERNAME',
      },
      sentinelPasswordFile: {
        doc: "Sentinels' `requirepass` file, read per connection.",
        format: 'file-path',
        default: '',
        env: 'SIDECAR_REDIS_SENTINEL_PASSWORD_FILE',
      },
      nodes: {
        doc: 'Seed nodes, `host:port` (e.g. a configuration endpoint).',
        format: 'text-list',
        default: [] as string[],
        env: 'SIDECAR_REDIS_NODES',
        whenUnset: 'required for `cluster`',
      },
      tls: {
        doc: 'TLS for `sentinel`, `cluster` (`standalone`: `rediss://`).',
        format: 'strict-boolean',
        default: false,
        env: 'SIDECAR_REDIS_TLS',
      },
      username: {
        doc: '[ACL user](fleet.md#the-redis-user); needs the password file.',
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_USERNAME',
      },
      passwordFile: {
        doc: 'Redis password file, read per connection ([rotation](fleet.md#rotating-the-redis-password)).',
        format: 'file-path',
        default: '',
        env: 'SIDECAR_REDIS_PASSWORD_FILE',
      },
      caFile: {
        doc: 'Extra PEM CAs for Redis.',
        format: 'file-path',
        default: '',
        env: 'SIDECAR_REDIS_CA_FILE',
      },
      keyPrefix: {
        doc: 'Key and channel prefix, not empty, no braces or whitespace; change only for a shared Redis.',
        format: 'text',
        default: 'signing-sidecar:',
        env: 'SIDECAR_REDIS_KEY_PREFIX',
      },
      commandTimeoutMs: {
        doc: 'Longest a command may take; past it, unavailable.',
        format: 'positive-int',
        default: 100,
        env: 'SIDECAR_REDIS_COMMAND_TIMEOUT_MS',
      },
      minReplicasAcked: {
        doc: 'Replicas that must `WAIT`-confirm an idempotency record before sending, else 503 ([failover](fleet.md#writes-a-failover-does-not-take-back)).',
        format: 'auto-or-whole-number',
        default: 'auto' as number | 'auto',
        env: 'SIDECAR_REDIS_MIN_REPLICAS_ACKED',
      },
    },
  },
  // Traces (docs/operations.md#tracing): on when the OpenTelemetry SDK's own OTEL_EXPORTER_OTLP_* endpoint is set.
  tracing: {
    propagateUpstream: {
      doc: "Send `traceparent`/`tracestate` upstream: the attempt's, or with tracing off the caller's ([tracing](operations.md#tracing)).",
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_TRACE_PROPAGATE_UPSTREAM',
    },
  },
  logLevel: {
    doc: 'pino log level.',
    format: [...LOG_LEVELS],
    default: 'info' as (typeof LOG_LEVELS)[number],
    env: 'SIDECAR_LOG_LEVEL',
  },
} satisfies SettingsTree;

/** A group of settings (a nested object of the config file) or the settings at the top. */
export interface SettingsTree {
  readonly [key: string]: Setting | SettingsTree;
}

/** convict's own test: a schema node with a default is a setting, any other object a group of them. */
export const isSetting = (node: Setting | SettingsTree): node is Setting => 'default' in node;

/** The settings' values, as SETTINGS declares them (the default gives each one's type), read-only. */
type ValuesOf<T> = {
  readonly [K in keyof T]: T[K] extends { readonly default: infer D }
    ? D extends ReadonlyArray<infer Item>
      ? readonly Item[]
      : D
    : ValuesOf<T[K]>;
};

/**
 * Every setting's value after convict applied the file and the environment, and setting-values.ts each format's
 * treatment (paths resolved, lists trimmed): what the groups' parsers validate further.
 */
export type Settings = ValuesOf<typeof SETTINGS>;

/**
 * A group's config, derived from its settings: those its parser uses as they are keep the schema's type, beside
 * what it makes of the others (`Parsed`, which replaces the settings of the same name); `Consumed` are settings
 * read into a parsed field of another name.
 */
export type GroupConfig<Values, Parsed, Consumed extends keyof Values = never> = Omit<Values, keyof Parsed | Consumed> &
  Readonly<Parsed>;

/** A group's settings without those its parser consumes: the rest of its config, as GroupConfig types it. */
export function withoutConsumed<Values extends object, Consumed extends keyof Values>(
  values: Values,
  consumed: readonly Consumed[],
): Omit<Values, Consumed> {
  const rest: Partial<Values> = { ...values };
  for (const key of consumed) delete rest[key];
  return rest as Omit<Values, Consumed>;
}

convict.addFormats(FORMATS);

/** The settings of this process: `env` over the config file (load.ts loads it) over the defaults. */
export function buildSchema(env: NodeJS.ProcessEnv): convict.Config<Settings> {
  // Explicit env and no argv: only the settings above are read, never the command line.
  return convict<Settings>(SETTINGS, { env, args: [] });
}

export type ConfigSchema = ReturnType<typeof buildSchema>;

/** A setting and its dotted key ("listen.port"), the name convict and the config file use. */
export interface KeyedSetting extends Setting {
  readonly key: string;
}

function flatten(tree: SettingsTree, prefix: string): KeyedSetting[] {
  return Object.entries(tree).flatMap(([name, node]) => {
    const key = prefix === '' ? name : `${prefix}.${name}`;
    return isSetting(node) ? [{ ...node, key }] : flatten(node, key);
  });
}

/** Every setting, in the order SETTINGS declares them. */
export const EVERY_SETTING: readonly KeyedSetting[] = flatten(SETTINGS, '');

const BY_KEY: ReadonlyMap<string, KeyedSetting> = new Map(EVERY_SETTING.map((setting) => [setting.key, setting]));

/** The env var of a schema key ("listen.port" gives "SIDECAR_LISTEN_PORT"), if it has one. */
export function envVarOf(key: string): string | undefined {
  return BY_KEY.get(key)?.env;
}

/** How refusals name a setting: `ENV_VAR (file.key)`, so the operator sees what they actually set. */
export function settingName(key: string): string {
  const env = envVarOf(key);
  return env === undefined ? key : `${env} (${key})`;
}
