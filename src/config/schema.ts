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
  /** What the reference shows instead of the default when the default means "not set" ("required", "off"). */
  readonly whenUnset?: string;
}

/** The env var that names the config file: read by load.ts itself, not a setting of the file. */
export const CONFIG_FILE_ENV = {
  env: 'SIDECAR_CONFIG_FILE',
  doc: 'optional config file (JSON or YAML)',
  whenUnset: 'none',
} as const;

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export const STATE_STORES = ['memory', 'redis'] as const;
export const REDIS_MODES = ['standalone', 'sentinel', 'cluster'] as const;
export const POSTBACK_DELIVERIES = ['auto', 'direct', 'queued'] as const;
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
    doc: 'Gateway base address: the one value used both for signing and for sending ([rules](#base-address)).',
    format: 'text',
    default: '',
    env: 'SIDECAR_BASE_URL',
    whenUnset: 'required',
  },
  environment: {
    doc: '`staging` or `production` (production requires `https://`).',
    format: 'text',
    default: '',
    env: 'SIDECAR_ENVIRONMENT',
    whenUnset: 'required',
  },
  username: {
    doc: 'Vendor account email.',
    format: 'text',
    default: '',
    env: 'SIDECAR_USERNAME',
    whenUnset: 'required',
  },
  passwordFile: {
    doc: 'File holding the account password (a trailing newline is ignored; an empty file is refused); preferred over `SIDECAR_PASSWORD`.',
    format: 'text',
    default: '',
    env: 'SIDECAR_PASSWORD_FILE',
    whenUnset: 'exactly one of the two',
  },
  password: {
    doc: 'The account password itself (prefer `SIDECAR_PASSWORD_FILE`; masked in any dump of the settings); setting both is refused.',
    format: 'text',
    default: '',
    env: 'SIDECAR_PASSWORD',
    sensitive: true,
    whenUnset: 'exactly one of the two',
  },
  privateKeyFile: {
    doc: 'PEM RSA private key, PKCS#1 or PKCS#8, unencrypted, at least 2048 bits ([key files](#private-key-and-password-files)).',
    format: 'text',
    default: '',
    env: 'SIDECAR_PRIVATE_KEY_FILE',
    whenUnset: 'required',
  },
  listen: {
    host: {
      doc: 'Where internal services connect: a loopback address (`127.0.0.0/8`, `::1`, `localhost`) unless `SIDECAR_LISTEN_ALLOW_NON_LOOPBACK` allows more ([listen host](#listen-host)).',
      format: 'text',
      default: '127.0.0.1',
      env: 'SIDECAR_LISTEN_HOST',
    },
    port: { doc: 'Proxy port (0 picks a free one).', format: 'tcp-port', default: 8080, env: 'SIDECAR_LISTEN_PORT' },
    allowNonLoopback: {
      doc: 'Allow a `SIDECAR_LISTEN_HOST` outside loopback: anything that reaches it can have payments signed (warned at start; [listen host](#listen-host)).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_LISTEN_ALLOW_NON_LOOPBACK',
    },
  },
  admin: {
    host: {
      doc: 'Metrics and health listener host.',
      format: 'text',
      default: '0.0.0.0',
      env: 'SIDECAR_ADMIN_HOST',
    },
    port: {
      doc: 'Metrics and health port (0 picks a free one).',
      format: 'tcp-port',
      default: 9464,
      env: 'SIDECAR_ADMIN_PORT',
    },
    readinessRequiresToken: {
      doc: '`/readyz` also requires a valid access token ([why not by default](operations.md#readiness-and-the-access-token)).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_READINESS_REQUIRES_TOKEN',
    },
  },
  upstream: {
    caFile: {
      doc: "Extra CA bundle (PEM) trusted for the gateway's TLS, added to the system roots; must hold a certificate.",
      format: 'text',
      default: '',
      env: 'SIDECAR_UPSTREAM_CA_FILE',
    },
    connectTimeoutMs: {
      doc: 'Time allowed to open a connection (TCP + TLS) to the gateway, and the longest a request waits for a free one.',
      format: 'positive-int',
      default: 5_000,
      env: 'SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS',
    },
    responseTimeoutMs: {
      doc: "Time allowed for the gateway's answer (head and body) once sent.",
      format: 'positive-int',
      default: 30_000,
      env: 'SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS',
    },
    connectRetryDeadlineMs: {
      doc: 'Total time spent retrying connection failures (nothing sent) before answering `unreachable`.',
      format: 'positive-int',
      default: 10_000,
      env: 'SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS',
    },
    keepAliveTimeoutMs: {
      doc: "Close an idle gateway connection after this long (and below the gateway's `Keep-Alive` hint).",
      format: 'positive-int',
      default: 4_000,
      env: 'SIDECAR_UPSTREAM_KEEPALIVE_TIMEOUT_MS',
    },
    answerCorrelationFields: {
      doc: "Payload fields the gateway's JSON answer must repeat when both carry them, else `outcome_unknown` ([answer correlation](#answer-correlation)); empty: off.",
      format: 'text-list',
      default: ['invoice_no'],
      env: 'SIDECAR_ANSWER_CORRELATION_FIELDS',
    },
    connections: {
      doc: 'Most keep-alive connections to the gateway.',
      format: 'positive-int',
      default: 64,
      env: 'SIDECAR_UPSTREAM_CONNECTIONS',
    },
    proxy: {
      url: {
        doc: 'Forward proxy for every gateway connection, `http://host:port` or `https://host:port`, no credentials: a `CONNECT` tunnel with TLS to the gateway inside ([forward proxy](operations.md#egress-through-a-forward-proxy)). Refused with `SIDECAR_UPSTREAM_PROXY_FROM_ENV=true`.',
        format: 'text',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_URL',
        whenUnset: 'none: direct',
      },
      fromEnv: {
        doc: 'Take the forward proxy from `HTTPS_PROXY` (`HTTP_PROXY` for an `http://` base; lowercase first) unless `NO_PROXY` covers the gateway; read at start.',
        format: 'strict-boolean',
        default: false,
        env: 'SIDECAR_UPSTREAM_PROXY_FROM_ENV',
      },
      username: {
        doc: "User for the proxy's Basic authentication (`Proxy-Authorization`); needs `SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE`.",
        format: 'text',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_USERNAME',
        whenUnset: 'none: no proxy authentication',
      },
      passwordFile: {
        doc: "File holding the proxy user's password (trailing newline ignored, empty refused); re-read for new tunnels ([secret rotation](#secret-rotation)).",
        format: 'text',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE',
      },
      caFile: {
        doc: "Extra CA bundle (PEM) for an `https://` proxy's own certificate, added to the system roots; re-read when it changes. Never used for the gateway's certificate.",
        format: 'text',
        default: '',
        env: 'SIDECAR_UPSTREAM_PROXY_CA_FILE',
      },
    },
  },
  signedRoutes: {
    doc: 'Paths (below the base address) accepted and signed, POST only; each starts with `/`, without `?` or `#`; at least one.',
    format: 'text-list',
    default: ['/api/v2/transaction/init', '/api/v2/transfer-out/init'],
    env: 'SIDECAR_SIGNED_ROUTES',
  },
  maxBodyBytes: {
    doc: 'Largest accepted client body, in bytes.',
    format: 'positive-int',
    default: 1_048_576,
    env: 'SIDECAR_MAX_BODY_BYTES',
  },
  clock: {
    skewCorrection: {
      doc: "Sign with the local time plus the gateway clock's offset measured from its `Date` header, so a node with a wrong clock keeps working ([runbook](runbooks.md#runbook-clock-skew)).",
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_CLOCK_SKEW_CORRECTION',
    },
    maxCorrectionSeconds: {
      doc: 'The largest correction applied; a measured offset beyond it is refused (counted) and the correction stays.',
      format: 'positive-int',
      default: 30,
      env: 'SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS',
    },
  },
  secretPollIntervalMs: {
    doc: 'How often the secret files are re-read for a rotated content ([secret rotation](#secret-rotation)).',
    format: 'positive-int',
    default: 1000,
    env: 'SIDECAR_SECRET_POLL_INTERVAL_MS',
  },
  token: {
    refreshTokenField: {
      doc: 'Body field that carries the refresh token in the refresh grant (the spec does not name it; this is the OAuth 2.0 name).',
      format: 'text',
      default: 'refresh_token',
      env: 'SIDECAR_TOKEN_REFRESH_FIELD',
    },
    refreshAheadMinSeconds: {
      doc: 'Refresh at least this long before the access token expires; must not exceed the maximum.',
      format: 'positive-int',
      default: 60,
      env: 'SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS',
    },
    refreshAheadMaxSeconds: {
      doc: 'Refresh at most this long before the access token expires (jittered between min and max).',
      format: 'positive-int',
      default: 120,
      env: 'SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS',
    },
    loginBackoffMaxMs: {
      doc: 'Cap of the exponential backoff between failed logins.',
      format: 'positive-int',
      default: 30_000,
      env: 'SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS',
    },
  },
  shutdown: {
    drainDelayMs: {
      doc: 'After SIGTERM, keep serving new requests this long while readiness is false, so endpoints drain.',
      format: 'whole-number',
      default: 5_000,
      env: 'SIDECAR_SHUTDOWN_DRAIN_DELAY_MS',
    },
    maxDelayMs: {
      doc: 'After the drain delay, wait at most this long for in-flight requests before exiting.',
      format: 'positive-int',
      default: 30_000,
      env: 'SIDECAR_SHUTDOWN_MAX_DELAY_MS',
    },
    quitEndpoint: {
      doc: 'Enable loopback-only `POST /quitquitquit` on the admin listener.',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_QUIT_ENDPOINT',
    },
  },
  idempotency: {
    required: {
      doc: 'Refuse signed requests without an `Idempotency-Key` header (`428 sidecar.idempotency.key_required`; [idempotency.md](idempotency.md)).',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_IDEMPOTENCY_REQUIRED',
    },
    ttlSeconds: {
      doc: "How long an `Idempotency-Key`'s answer is kept after it was recorded ([idempotency.md](idempotency.md#how-long-keys-are-kept)).",
      format: 'positive-int',
      default: 86_400,
      env: 'SIDECAR_IDEMPOTENCY_TTL_SECONDS',
    },
  },
  // The postback receiver (docs/postbacks.md): off unless forwardUrl is set.
  postback: {
    forwardUrl: {
      doc: 'Where verified postbacks go as plain JSON (`http` or `https`); setting it turns the [postback receiver](postbacks.md) on.',
      format: 'text',
      default: '',
      env: 'SIDECAR_POSTBACK_FORWARD_URL',
      whenUnset: 'off',
    },
    listen: {
      host: {
        doc: "The receiver's own listener host (reached through the pod's Service/Ingress; never the egress listener).",
        format: 'text',
        default: '0.0.0.0',
        env: 'SIDECAR_POSTBACK_LISTEN_HOST',
      },
      port: {
        doc: "The receiver's port (0 picks a free one); must differ from the proxy and admin ports.",
        format: 'tcp-port',
        default: 8081,
        env: 'SIDECAR_POSTBACK_LISTEN_PORT',
      },
    },
    publicUrl: {
      doc: 'The webhook URL exactly as registered: the signed URL; its path is the one route served.',
      format: 'text',
      default: '',
      env: 'SIDECAR_POSTBACK_PUBLIC_URL',
      whenUnset: 'required when on',
    },
    publicKeyFile: {
      doc: "The gateway's postback public key(s), PEM, RSA >= 2048 bits; several during a rotation; re-read like the secret files.",
      format: 'text',
      default: '',
      env: 'SIDECAR_POSTBACK_PUBLIC_KEY_FILE',
      whenUnset: 'required unless unsigned are accepted',
    },
    acceptUnsigned: {
      doc: 'Accept postbacks without signature headers (accounts without signed postbacks); requires `SIDECAR_POSTBACK_ALLOW_CIDRS`.',
      format: 'strict-boolean',
      default: false,
      env: 'SIDECAR_POSTBACK_ACCEPT_UNSIGNED',
    },
    allowCidrs: {
      doc: 'Source addresses or CIDR ranges allowed to deliver, checked before anything else against the TCP peer.',
      format: 'text-list',
      default: [] as string[],
      env: 'SIDECAR_POSTBACK_ALLOW_CIDRS',
      whenUnset: 'any',
    },
    forwardTimeoutMs: {
      doc: "Time allowed for the internal service's answer; past it the gateway gets 503 and redelivers.",
      format: 'positive-int',
      default: 10_000,
      env: 'SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS',
    },
    maxAgeSeconds: {
      doc: 'A postback `X-Timestamp` more than this far behind the local clock is refused (`postback.timestamp.expired`).',
      format: 'positive-int',
      default: 60,
      env: 'SIDECAR_POSTBACK_MAX_AGE_SECONDS',
    },
    maxFutureSeconds: {
      doc: 'A postback `X-Timestamp` more than this far ahead of the local clock is refused (`postback.timestamp.future`).',
      format: 'whole-number',
      default: 5,
      env: 'SIDECAR_POSTBACK_MAX_FUTURE_SECONDS',
    },
    deliveredTtlSeconds: {
      doc: "How long a delivered payload's SHA-256 is kept: a redelivery within it gets 200, no second forward.",
      format: 'positive-int',
      default: 86_400,
      env: 'SIDECAR_POSTBACK_DELIVERED_TTL_SECONDS',
    },
    maxConnections: {
      doc: 'Most connections the receiver holds open at once; past it new ones are refused (slow or hostile senders).',
      format: 'positive-int',
      default: 256,
      env: 'SIDECAR_POSTBACK_MAX_CONNECTIONS',
    },
    delivery: {
      doc: '`direct`: 200 after a 2xx from the application, else 503. `queued` (needs `SIDECAR_STATE_STORE=redis`): 200 once kept in Redis, then delivered with retries ([postbacks.md](postbacks.md#queued-delivery)). `auto`: `queued` in production with Redis, else `direct`.',
      format: [...POSTBACK_DELIVERIES],
      default: 'auto' as (typeof POSTBACK_DELIVERIES)[number],
      env: 'SIDECAR_POSTBACK_DELIVERY',
    },
    orderField: {
      doc: "`queued` delivery: the payload's top-level field naming the transaction, whose postbacks go in arrival order (the simulator's field; without it, no order).",
      format: 'text',
      default: 'transaction_id',
      env: 'SIDECAR_POSTBACK_ORDER_FIELD',
    },
    deliveryConcurrency: {
      doc: '`queued` delivery: most postbacks each replica delivers to the internal service at once.',
      format: 'positive-int',
      default: 4,
      env: 'SIDECAR_POSTBACK_DELIVERY_CONCURRENCY',
    },
    retrySchedule: {
      doc: '`queued` delivery: the delay before each attempt (`ms`, `s`, `m`, `h`, `d`), ±10 % jitter, or a longer `Retry-After` from the application; after the last, a dead letter.',
      format: 'text-list',
      default: DEFAULT_POSTBACK_RETRY_SCHEDULE,
      env: 'SIDECAR_POSTBACK_RETRY_SCHEDULE',
    },
    visibilityTimeoutMs: {
      doc: '`queued` delivery: a postback a replica has not finished in this time is taken over by another.',
      format: 'positive-int',
      default: 60_000,
      env: 'SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS',
    },
  },
  // The shared state (docs/fleet.md): the token record, postback nonces, idempotency keys.
  state: {
    store: {
      doc: '`memory` (one pod) or `redis` (a fleet of replicas sharing one token, postback memory and idempotency keys; [fleet.md](fleet.md)).',
      format: [...STATE_STORES],
      default: 'memory' as (typeof STATE_STORES)[number],
      env: 'SIDECAR_STATE_STORE',
    },
    memoryMaxEntries: {
      doc: 'Most entries the memory store holds; past it the oldest go first (counted: `signing_sidecar_state_store_evictions_total`).',
      format: 'positive-int',
      // The memory store's own default (DEFAULT_MEMORY_STORE_MAX_ENTRIES) has the same value.
      default: 200_000,
      env: 'SIDECAR_STATE_MEMORY_MAX_ENTRIES',
    },
    redis: {
      mode: {
        doc: 'How Redis is found: `standalone` (`SIDECAR_REDIS_URL`), `sentinel` (`SIDECAR_REDIS_SENTINELS`, `SIDECAR_REDIS_SENTINEL_MASTER`) or `cluster` (`SIDECAR_REDIS_NODES`) ([topologies](fleet.md#redis-topologies)).',
        format: [...REDIS_MODES],
        default: 'standalone' as (typeof REDIS_MODES)[number],
        env: 'SIDECAR_REDIS_MODE',
      },
      url: {
        doc: '`redis://host:6379` or `rediss://host:6380` (TLS), optionally `/<database>`, no credentials; required in `standalone` mode.',
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_URL',
        sensitive: true,
        whenUnset: 'required for `standalone`',
      },
      sentinels: {
        doc: 'Sentinel mode: the Sentinels, `host:port`, comma-separated (any one answering is enough).',
        format: 'text-list',
        default: [] as string[],
        env: 'SIDECAR_REDIS_SENTINELS',
        whenUnset: 'required for `sentinel`',
      },
      sentinelMaster: {
        doc: "Sentinel mode: the monitored primary's name (`sentinel monitor <name> ...`; `mymaster` in most charts).",
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_SENTINEL_MASTER',
        whenUnset: 'required for `sentinel`',
      },
      sentinelUsername: {
        doc: 'Sentinel mode: the ACL user on the Sentinels, when they require one; needs `SIDECAR_REDIS_SENTINEL_PASSWORD_FILE`.',
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_SENTINEL_USERNAME',
      },
      sentinelPasswordFile: {
        doc: "Sentinel mode: file holding the Sentinels' password (`requirepass` on the Sentinels), read again at every connection.",
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_SENTINEL_PASSWORD_FILE',
      },
      nodes: {
        doc: "Cluster mode: seed nodes, `host:port`, comma-separated (a managed service's configuration endpoint is one).",
        format: 'text-list',
        default: [] as string[],
        env: 'SIDECAR_REDIS_NODES',
        whenUnset: 'required for `cluster`',
      },
      tls: {
        doc: 'Sentinel and cluster modes: TLS to every node and Sentinel (`standalone`: `rediss://`).',
        format: 'strict-boolean',
        default: false,
        env: 'SIDECAR_REDIS_TLS',
      },
      username: {
        doc: 'Redis ACL user ([fleet.md](fleet.md#the-redis-user)); needs `SIDECAR_REDIS_PASSWORD_FILE`.',
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_USERNAME',
      },
      passwordFile: {
        doc: 'File holding the Redis password (ACL or default user; trailing newline ignored, empty refused), read at every connection ([rotation](fleet.md#rotating-the-redis-password)).',
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_PASSWORD_FILE',
      },
      caFile: {
        doc: "Extra CA bundle (PEM) for Redis's TLS, added to the system roots.",
        format: 'text',
        default: '',
        env: 'SIDECAR_REDIS_CA_FILE',
      },
      keyPrefix: {
        doc: 'Prefix of every key and channel (no braces or whitespace); change it only when several products share the Redis.',
        format: 'text',
        default: 'signing-sidecar:',
        env: 'SIDECAR_REDIS_KEY_PREFIX',
      },
      commandTimeoutMs: {
        doc: 'The longest one Redis command may take; past it the store is unavailable for that call.',
        format: 'positive-int',
        default: 100,
        env: 'SIDECAR_REDIS_COMMAND_TIMEOUT_MS',
      },
      minReplicasAcked: {
        doc: 'Replicas that must hold an idempotency record (`WAIT`) before the request is sent, else 503 retryable. `auto`: 1 for `sentinel` and a cluster with replicas, else 0 ([failover](fleet.md#writes-a-failover-does-not-take-back)).',
        format: 'auto-or-whole-number',
        default: 'auto' as number | 'auto',
        env: 'SIDECAR_REDIS_MIN_REPLICAS_ACKED',
      },
    },
  },
  // Traces (docs/operations.md#tracing): on when the OpenTelemetry SDK's own OTEL_EXPORTER_OTLP_* endpoint is set.
  tracing: {
    propagateUpstream: {
      doc: "Send `traceparent` / `tracestate` to the gateway: each attempt's own with tracing on, the caller's with tracing off ([tracing](operations.md#tracing)).",
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

/** The settings' values, as SETTINGS declares them (the default gives each one's type). */
type ValuesOf<T> = { [K in keyof T]: T[K] extends { readonly default: infer D } ? D : ValuesOf<T[K]> };

/** Every setting's value after convict applied the file and the environment: what load.ts validates further. */
export type Settings = ValuesOf<typeof SETTINGS>;

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
