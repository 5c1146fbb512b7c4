import convict from 'convict';

// Every setting of the public contract (docs/configuration.md), plus the tunables operators may need.
// Each has an env var (SIDECAR_*) and a key in the optional config file. Defaults < file < env.

// Refusals are reported as `ENV_VAR (file.key): <message>`, so the messages below do not repeat the name.
const positiveInt = (value: unknown) => {
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
    throw new Error('must be a positive integer');
  }
};

const nonNegativeInt = (value: unknown) => {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new Error('must be a whole number >= 0');
  }
};

const BOOLEAN_TEXT: Readonly<Record<string, boolean>> = { true: true, false: false, '1': true, '0': false };

/**
 * Every boolean setting uses this format, never convict's Boolean: convict reads any text but "false" as true, so
 * SIDECAR_QUIT_ENDPOINT=0, =no, =off or = (empty) turned the endpoint on. Text is true or false (any case), 1 or
 * 0; anything else is left as text, which the validation then refuses.
 */
convict.addFormat({
  name: 'strict-boolean',
  coerce: (text: string): unknown => BOOLEAN_TEXT[text.toLowerCase()] ?? text,
  validate: (value: unknown) => {
    if (typeof value !== 'boolean') throw new Error('must be true or false (or 1 or 0)');
  },
});

export function buildSchema(env: NodeJS.ProcessEnv) {
  return convict(
    {
      baseUrl: {
        doc: 'Gateway base address: the one value used both for signing and for sending.',
        format: String,
        default: '',
        env: 'SIDECAR_BASE_URL',
      },
      environment: {
        doc: 'staging or production (production requires https).',
        format: String,
        default: '',
        env: 'SIDECAR_ENVIRONMENT',
      },
      username: {
        doc: 'Vendor account email.',
        format: String,
        default: '',
        env: 'SIDECAR_USERNAME',
      },
      passwordFile: {
        doc: 'File holding the account password (preferred over SIDECAR_PASSWORD).',
        format: String,
        default: '',
        env: 'SIDECAR_PASSWORD_FILE',
      },
      password: {
        doc: 'Account password (prefer SIDECAR_PASSWORD_FILE).',
        format: String,
        default: '',
        env: 'SIDECAR_PASSWORD',
        sensitive: true,
      },
      privateKeyFile: {
        doc: 'PEM RSA private key (PKCS#1 or PKCS#8), at least 2048 bits.',
        format: String,
        default: '',
        env: 'SIDECAR_PRIVATE_KEY_FILE',
      },
      listen: {
        host: {
          doc: 'Where internal services connect: a loopback address unless allowNonLoopback is set.',
          format: String,
          default: '127.0.0.1',
          env: 'SIDECAR_LISTEN_HOST',
        },
        port: { doc: 'Proxy port (0 picks a free one).', format: 'port', default: 8080, env: 'SIDECAR_LISTEN_PORT' },
        allowNonLoopback: {
          doc: 'Allow a listen host outside loopback: anything that reaches it can have payments signed (warned at start).',
          format: 'strict-boolean',
          default: false,
          env: 'SIDECAR_LISTEN_ALLOW_NON_LOOPBACK',
        },
      },
      admin: {
        host: {
          doc: 'Metrics and health listener host.',
          format: String,
          default: '0.0.0.0',
          env: 'SIDECAR_ADMIN_HOST',
        },
        port: {
          doc: 'Metrics and health port (0 picks a free one).',
          format: 'port',
          default: 9464,
          env: 'SIDECAR_ADMIN_PORT',
        },
        readinessRequiresToken: {
          doc: '/readyz also requires a valid access token (off: ready means serving; token health is on /healthz/token, metrics and alerts).',
          format: 'strict-boolean',
          default: false,
          env: 'SIDECAR_READINESS_REQUIRES_TOKEN',
        },
      },
      upstream: {
        caFile: {
          doc: "Extra CA bundle (PEM) trusted for the gateway's TLS, added to the system roots.",
          format: String,
          default: '',
          env: 'SIDECAR_UPSTREAM_CA_FILE',
        },
        connectTimeoutMs: {
          doc: 'Time allowed to open a connection (TCP + TLS) to the gateway, and to wait for a free one.',
          format: positiveInt,
          default: 5_000,
          env: 'SIDECAR_UPSTREAM_CONNECT_TIMEOUT_MS',
        },
        responseTimeoutMs: {
          doc: 'Time allowed for the gateway to answer once the request was sent (headers and body).',
          format: positiveInt,
          default: 30_000,
          env: 'SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS',
        },
        connectRetryDeadlineMs: {
          doc: 'Total time spent retrying connection failures (nothing sent) before answering unreachable.',
          format: positiveInt,
          default: 10_000,
          env: 'SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS',
        },
        keepAliveTimeoutMs: {
          doc: 'Close an idle gateway connection after this long (kept below the gateway idle timeout, so a request is never written to a socket the gateway is closing).',
          format: positiveInt,
          default: 4_000,
          env: 'SIDECAR_UPSTREAM_KEEPALIVE_TIMEOUT_MS',
        },
        answerCorrelationFields: {
          doc: "Payload fields that the gateway's JSON answer must echo with the same value when both carry them (comma-separated; empty turns the check off). A mismatch is a stray answer: outcome_unknown.",
          format: Array,
          default: ['invoice_no'],
          env: 'SIDECAR_ANSWER_CORRELATION_FIELDS',
        },
        connections: {
          doc: 'Maximum keep-alive connections to the gateway.',
          format: positiveInt,
          default: 64,
          env: 'SIDECAR_UPSTREAM_CONNECTIONS',
        },
      },
      signedRoutes: {
        doc: 'Paths (below the base address) accepted and signed; POST only.',
        format: Array,
        default: ['/api/v2/transaction/init', '/api/v2/transfer-out/init'],
        env: 'SIDECAR_SIGNED_ROUTES',
      },
      maxBodyBytes: {
        doc: 'Largest accepted client body, in bytes.',
        format: positiveInt,
        default: 1_048_576,
        env: 'SIDECAR_MAX_BODY_BYTES',
      },
      clock: {
        skewCorrection: {
          doc: "Sign with the local time plus the gateway clock's measured offset (from its Date header), so a node whose clock is off keeps working while the clock-skew alert asks for NTP to be fixed.",
          format: 'strict-boolean',
          default: false,
          env: 'SIDECAR_CLOCK_SKEW_CORRECTION',
        },
        maxCorrectionSeconds: {
          doc: 'The largest correction applied; a measured offset beyond it is refused (counted) and the correction stays.',
          format: positiveInt,
          default: 30,
          env: 'SIDECAR_CLOCK_SKEW_MAX_CORRECTION_SECONDS',
        },
      },
      secretPollIntervalMs: {
        doc: 'How often the secret files (private key, password, upstream CA) are read for a rotated content; a valid new content is used from the next request or login.',
        format: positiveInt,
        default: 1000,
        env: 'SIDECAR_SECRET_POLL_INTERVAL_MS',
      },
      token: {
        refreshTokenField: {
          doc: 'Body field that carries the refresh token in the refresh grant (not in the spec; OAuth 2.0 name).',
          format: String,
          default: 'refresh_token',
          env: 'SIDECAR_TOKEN_REFRESH_FIELD',
        },
        refreshAheadMinSeconds: {
          doc: 'Refresh at least this long before the access token expires.',
          format: positiveInt,
          default: 60,
          env: 'SIDECAR_TOKEN_REFRESH_AHEAD_MIN_SECONDS',
        },
        refreshAheadMaxSeconds: {
          doc: 'Refresh at most this long before the access token expires (jittered between min and max).',
          format: positiveInt,
          default: 120,
          env: 'SIDECAR_TOKEN_REFRESH_AHEAD_MAX_SECONDS',
        },
        loginBackoffMaxMs: {
          doc: 'Cap of the exponential backoff between failed logins.',
          format: positiveInt,
          default: 30_000,
          env: 'SIDECAR_TOKEN_LOGIN_BACKOFF_MAX_MS',
        },
      },
      shutdown: {
        drainDelayMs: {
          doc: 'After SIGTERM, keep serving new requests this long while readiness is false, so endpoints drain.',
          format: nonNegativeInt,
          default: 5_000,
          env: 'SIDECAR_SHUTDOWN_DRAIN_DELAY_MS',
        },
        maxDelayMs: {
          doc: 'After the drain delay, wait at most this long for in-flight requests before exiting.',
          format: positiveInt,
          default: 30_000,
          env: 'SIDECAR_SHUTDOWN_MAX_DELAY_MS',
        },
        quitEndpoint: {
          doc: 'Enable loopback-only POST /quitquitquit on the admin listener.',
          format: 'strict-boolean',
          default: false,
          env: 'SIDECAR_QUIT_ENDPOINT',
        },
      },
      idempotency: {
        required: {
          doc: 'Refuse signed requests without an Idempotency-Key header (428 sidecar.idempotency.key_required).',
          format: 'strict-boolean',
          default: false,
          env: 'SIDECAR_IDEMPOTENCY_REQUIRED',
        },
        ttlSeconds: {
          doc: "How long an Idempotency-Key's answer is kept after it was recorded (docs/idempotency.md).",
          format: positiveInt,
          default: 86_400,
          env: 'SIDECAR_IDEMPOTENCY_TTL_SECONDS',
        },
      },
      // The postback receiver (docs/postbacks.md): off unless forwardUrl is set.
      postback: {
        forwardUrl: {
          doc: 'Internal URL that receives verified postbacks as plain JSON (http or https); setting it turns the receiver on.',
          format: String,
          default: '',
          env: 'SIDECAR_POSTBACK_FORWARD_URL',
        },
        listen: {
          host: {
            doc: "The receiver's own listener host (reached through the pod's Service/Ingress; never the egress listener).",
            format: String,
            default: '0.0.0.0',
            env: 'SIDECAR_POSTBACK_LISTEN_HOST',
          },
          port: {
            doc: "The receiver's port (0 picks a free one).",
            format: 'port',
            default: 8081,
            env: 'SIDECAR_POSTBACK_LISTEN_PORT',
          },
        },
        publicUrl: {
          doc: 'The webhook URL exactly as registered with the gateway: the URL in the signing string; its path is the one route served.',
          format: String,
          default: '',
          env: 'SIDECAR_POSTBACK_PUBLIC_URL',
        },
        publicKeyFile: {
          doc: "The gateway's postback public key(s), PEM; several keys in one file during a rotation.",
          format: String,
          default: '',
          env: 'SIDECAR_POSTBACK_PUBLIC_KEY_FILE',
        },
        acceptUnsigned: {
          doc: 'Accept postbacks without signature headers (accounts without signed postbacks); requires allowCidrs.',
          format: 'strict-boolean',
          default: false,
          env: 'SIDECAR_POSTBACK_ACCEPT_UNSIGNED',
        },
        allowCidrs: {
          doc: 'Source addresses or CIDR ranges allowed to deliver (comma-separated), checked before anything else; empty: any.',
          format: Array,
          default: [],
          env: 'SIDECAR_POSTBACK_ALLOW_CIDRS',
        },
        forwardTimeoutMs: {
          doc: "Time allowed for the internal service's answer; past it the gateway gets 503 and redelivers.",
          format: positiveInt,
          default: 10_000,
          env: 'SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS',
        },
        maxAgeSeconds: {
          doc: 'A postback timestamp more than this far behind the local clock is refused (postback.timestamp.expired).',
          format: positiveInt,
          default: 60,
          env: 'SIDECAR_POSTBACK_MAX_AGE_SECONDS',
        },
        maxFutureSeconds: {
          doc: 'A postback timestamp more than this far ahead of the local clock is refused (postback.timestamp.future).',
          format: nonNegativeInt,
          default: 5,
          env: 'SIDECAR_POSTBACK_MAX_FUTURE_SECONDS',
        },
        deliveredTtlSeconds: {
          doc: "How long a delivered payload's SHA-256 is remembered: a redelivery within it gets 200 without a second forward.",
          format: positiveInt,
          default: 86_400,
          env: 'SIDECAR_POSTBACK_DELIVERED_TTL_SECONDS',
        },
        maxConnections: {
          doc: 'Most connections the receiver holds open at once; past it new ones are refused (slow or hostile senders).',
          format: positiveInt,
          default: 256,
          env: 'SIDECAR_POSTBACK_MAX_CONNECTIONS',
        },
      },
      // The shared state (docs/fleet.md): the token record, postback nonces, idempotency keys.
      state: {
        store: {
          doc: 'memory (one pod) or redis (a fleet of replicas sharing one token, nonces and idempotency keys).',
          format: ['memory', 'redis'],
          default: 'memory',
          env: 'SIDECAR_STATE_STORE',
        },
        memoryMaxEntries: {
          doc: 'Most entries the memory store holds; past it the oldest go first (counted). Same value as DEFAULT_MEMORY_STORE_MAX_ENTRIES.',
          format: positiveInt,
          default: 200_000,
          env: 'SIDECAR_STATE_MEMORY_MAX_ENTRIES',
        },
        redis: {
          url: {
            doc: 'redis://host:port[/db] or rediss:// (TLS); required for the redis store; no credentials in it.',
            format: String,
            default: '',
            env: 'SIDECAR_REDIS_URL',
            sensitive: true,
          },
          username: {
            doc: 'Redis ACL user (with SIDECAR_REDIS_PASSWORD_FILE).',
            format: String,
            default: '',
            env: 'SIDECAR_REDIS_USERNAME',
          },
          passwordFile: {
            doc: 'File holding the Redis password (of the ACL user, or of the default user); read again at every connection.',
            format: String,
            default: '',
            env: 'SIDECAR_REDIS_PASSWORD_FILE',
          },
          caFile: {
            doc: 'Extra CA bundle (PEM) trusted for rediss://, besides the system roots.',
            format: String,
            default: '',
            env: 'SIDECAR_REDIS_CA_FILE',
          },
          keyPrefix: {
            doc: "Prefix of every key and channel; each account's keys also share a hash tag (Redis Cluster).",
            format: String,
            default: 'signing-sidecar:',
            env: 'SIDECAR_REDIS_KEY_PREFIX',
          },
          commandTimeoutMs: {
            doc: 'The longest any Redis command may take; past it the store counts as unavailable for that call.',
            format: positiveInt,
            default: 100,
            env: 'SIDECAR_REDIS_COMMAND_TIMEOUT_MS',
          },
          minReplicasAcked: {
            doc: 'Replicas that must hold an idempotency record (WAIT, within the command timeout) before the request is sent; fewer: refused 503 retryable. 0 waits for none.',
            format: 'nat',
            default: 0,
            env: 'SIDECAR_REDIS_MIN_REPLICAS_ACKED',
          },
        },
      },
      logLevel: {
        doc: 'pino log level.',
        format: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
        default: 'info',
        env: 'SIDECAR_LOG_LEVEL',
      },
    },
    // Explicit env and no argv: only the settings above are read, never the command line.
    { env, args: [] },
  );
}

export type ConfigSchema = ReturnType<typeof buildSchema>;

interface SchemaNode {
  readonly env?: string;
  readonly _cvtProperties?: Record<string, SchemaNode>;
}

let settingsOnly: ConfigSchema | undefined;

/** The env var of a schema key ("listen.port" gives "SIDECAR_LISTEN_PORT"), if it has one. */
export function envVarOf(key: string): string | undefined {
  settingsOnly ??= buildSchema({});
  let node: SchemaNode | undefined = settingsOnly.getSchema() as unknown as SchemaNode;
  for (const part of key.split('.')) node = node?._cvtProperties?.[part];
  return node?.env;
}

/** How refusals name a setting: `ENV_VAR (file.key)`, so the operator sees what they actually set. */
export function settingName(key: string): string {
  const env = envVarOf(key);
  return env === undefined ? key : `${env} (${key})`;
}
