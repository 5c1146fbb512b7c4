// The egress listener's contract as an OpenAPI 3.1 document (docs/clients.md), built from the code's own
// declarations: the signed routes configured and their payloads (signed-routes.ts), the error catalogue
// (error-catalogue.ts), the headers the listener reads and writes, what the sidecar does toward the gateway, and the
// postback it delivers to the application (postback-webhook.ts). Never written by hand: `npm run docs:openapi` writes
// docs/openapi.json from the defaults (a test fails when it is stale), and the admin listener serves GET
// /openapi.json for the settings this sidecar runs with. Internal services generate clients from it.
import type { Config } from '../config/config.js';
import { SETTINGS } from '../config/schema.js';
import type { SidecarErrorCode, SidecarErrorDetails } from '../errors.js';
import { packageVersion } from '../observability/package-version.js';
import { errorCatalogue, type CatalogueEntry } from './error-catalogue.js';
import { POSTBACK_PAYLOAD_SCHEMA, postbackWebhook } from './postback-webhook.js';
import { SIGNED_ROUTES, unknownRoute, type SignedRouteContract } from './signed-routes.js';

/**
 * Answered before the path is matched (any path, any method), or for requests to no signed route: never from the
 * POST operations of the signed routes (whose own answers also include the first two).
 */
const BEFORE_ROUTING: readonly SidecarErrorCode[] = [
  'sidecar.request.forbidden_host',
  'sidecar.request.browser_origin',
  'sidecar.request.expectation_failed',
];
const OUTSIDE_SIGNED_ROUTES: readonly SidecarErrorCode[] = ['sidecar.route.not_found', 'sidecar.method.not_allowed'];

/** The gateway's error codes the spec names (section 7): its bodies are passed through, never rewritten. */
export const GATEWAY_CODES = [
  'FAILED',
  'signature.verify.failed',
  'signature.timestamp.expired',
  'signature.timestamp.future',
  'signature.nonce.replayed',
] as const;

export interface OpenApiInputs {
  /** SIDECAR_SIGNED_ROUTES. */
  readonly signedRoutes: readonly string[];
  /** SIDECAR_MAX_BODY_BYTES (in too_large's message). */
  readonly maxBodyBytes: number;
  /** SIDECAR_IDEMPOTENCY_REQUIRED: Idempotency-Key is then a required header. */
  readonly idempotencyRequired: boolean;
  /** SIDECAR_UPSTREAM_CONNECT_RETRY_DEADLINE_MS: how long connection failures are retried. */
  readonly connectRetryDeadlineMs: number;
  /** SIDECAR_ANSWER_CORRELATION_FIELDS: fields an answer must echo; empty: not checked. */
  readonly answerCorrelationFields: readonly string[];
  /** Whether deliveries to the application are signed (the webhook's Standard Webhooks headers then required). */
  readonly deliveriesSigned: boolean;
  /** The egress listener's address, `http://host:port`. */
  readonly serverUrl: string;
  readonly version: string;
}

/** The inputs of the document served for this configuration; `serverUrl`: where the egress listener listens. */
export function openApiInputs(config: Config, serverUrl: string): OpenApiInputs {
  return {
    signedRoutes: config.signedRoutes,
    maxBodyBytes: config.maxBodyBytes,
    idempotencyRequired: config.idempotency.required,
    connectRetryDeadlineMs: config.upstream.connectRetryDeadlineMs,
    answerCorrelationFields: config.upstream.answerCorrelationFields,
    // With the receiver off, as production runs it: signed.
    deliveriesSigned: config.postback === undefined || config.postback.forwardSecret !== undefined,
    serverUrl,
    version: packageVersion(),
  };
}

/** The inputs of the document in docs/openapi.json: the schema's defaults (and production's signed deliveries). */
export function defaultOpenApiInputs(version: string): OpenApiInputs {
  const { host, port } = SETTINGS.listen;
  return {
    signedRoutes: SETTINGS.signedRoutes.default,
    maxBodyBytes: SETTINGS.maxBodyBytes.default,
    idempotencyRequired: SETTINGS.idempotency.required.default,
    connectRetryDeadlineMs: SETTINGS.upstream.connectRetryDeadlineMs.default,
    answerCorrelationFields: SETTINGS.upstream.answerCorrelationFields.default,
    deliveriesSigned: true,
    serverUrl: `http://${host.default}:${port.default}`,
    version,
  };
}

const ref = (kind: 'schemas' | 'headers' | 'parameters' | 'responses', name: string) => ({
  $ref: `#/components/${kind}/${name}`,
});

const SIDECAR_CODE_PATTERN = '^sidecar\\.';

/**
 * The document. `strictRoutes`: a signed route not in SIGNED_ROUTES is an error (the committed document, made from
 * the schema's defaults); served for a configured route, it gets a generic description and payload instead.
 */
export function openApiDocument(inputs: OpenApiInputs, strictRoutes = false): Record<string, unknown> {
  const catalogue = errorCatalogue(inputs.maxBodyBytes);
  const onRoutes = catalogue.filter((entry) => !OUTSIDE_SIGNED_ROUTES.includes(entry.code));
  const offRoutes = catalogue.filter(
    (entry) => OUTSIDE_SIGNED_ROUTES.includes(entry.code) || BEFORE_ROUTING.includes(entry.code),
  );
  const routes = inputs.signedRoutes.map((route) => ({ route, contract: routeContract(route, strictRoutes) }));
  const paths = Object.fromEntries(
    routes.map(({ route, contract }) => [route, { post: operation(route, contract, inputs, onRoutes) }]),
  );
  const payloads = Object.fromEntries(routes.map(({ contract: { payload } }) => [payload.name, payload.schema]));
  return {
    openapi: '3.1.0',
    info: {
      title: 'signing-sidecar local API',
      version: inputs.version,
      summary: 'Plain JSON in on localhost; wrapped, signed and sent to the Payment Gateway Vendor API v2.',
      description: [
        "Internal services POST the gateway's plain JSON payload to a signed route; the sidecar wraps it into the",
        "`data` envelope, attaches the token and the RSA signature, sends it, and hands the gateway's answer back",
        'unchanged. The answers it makes itself are JSON `{code, message, retryable}` with a `sidecar.` code;',
        '`retryable` is true only when the gateway certainly did not receive the request. Every answer carries',
        '`X-Request-Id`. A request to any other path is answered `404 sidecar.route.not_found`, another method on a',
        'signed route `405 sidecar.method.not_allowed`, and a request with a foreign `Host` or made by a browser',
        '`421`/`403` on every path: these are `components.responses.unrouted-<status>`. The postback the sidecar',
        'delivers to the application is `webhooks.postback`. How to call and retry: docs/clients.md.',
      ].join(' '),
      license: { name: 'UNLICENSED', identifier: 'UNLICENSED' },
    },
    servers: [
      {
        url: inputs.serverUrl,
        description: 'the egress listener (loopback: SIDECAR_LISTEN_HOST, SIDECAR_LISTEN_PORT)',
      },
    ],
    // No authentication: the listener trusts where it listens (loopback) and who addresses it (Host, no Origin).
    security: [],
    paths,
    webhooks: { postback: postbackWebhook(inputs.deliveriesSigned) },
    components: {
      schemas: {
        ...Object.fromEntries(catalogue.map((entry) => [entry.code, errorSchema(entry)])),
        GatewayAnswer: gatewayAnswerSchema(),
        ...payloads,
        PostbackPayload: POSTBACK_PAYLOAD_SCHEMA,
      },
      parameters: {
        'Idempotency-Key': {
          name: 'Idempotency-Key',
          in: 'header',
          required: inputs.idempotencyRequired,
          description: [
            'One key per payment, made and stored before the first attempt, so that every retry sends it. The first',
            "request with it claims it; a retry with the same route, query and body is answered from the key's record",
            '(`Idempotent-Replayed: true`), or `409 sidecar.idempotency.in_progress` while the first is under way:',
            'never sent twice. The key with another request: `422 sidecar.idempotency.key_reused`. The record keeps',
            `the gateway's answers and \`outcome_unknown\` for \`${SETTINGS.idempotency.ttlSeconds.env}\`; an answer`,
            'with `retryable: true` (nothing sent) releases the key. Never forwarded (docs/idempotency.md).',
          ].join(' '),
          schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$' },
        },
        'X-Request-Id': {
          name: 'X-Request-Id',
          in: 'header',
          required: false,
          description: 'Echoed in the answer and forwarded to the gateway; one is generated when absent.',
          schema: { type: 'string' },
        },
      },
      headers: {
        'X-Request-Id': {
          required: true,
          description: "The request's id: the caller's, or one the sidecar made. In the log line of the request.",
          schema: { type: 'string', minLength: 1 },
        },
        'Idempotent-Replayed': {
          required: false,
          description: "`true`: the answer of the key's first request, from the record; nothing was sent.",
          schema: { type: 'string', const: 'true' },
        },
        'Retry-After': {
          required: false,
          description:
            'Seconds to wait before sending again with the same key (on 409 in_progress, 503 budget_exhausted and 503 overloaded).',
          schema: { type: 'string', pattern: '^[0-9]+$' },
        },
        Allow: {
          required: false,
          description: 'The methods of the path (`POST`), on `405 sidecar.method.not_allowed`.',
          schema: { type: 'string' },
        },
      },
      responses: Object.fromEntries(
        groupByStatus(offRoutes).map(([status, entries]) => [`unrouted-${status}`, sidecarResponse(status, entries)]),
      ),
    },
  };
}

/** The route's contract; a route the schema does not ship gets a generic one, unless `strict`. */
function routeContract(route: string, strict: boolean): SignedRouteContract {
  const known = SIGNED_ROUTES[route];
  if (known !== undefined) return known;
  if (strict) throw new Error(`signed route ${route} has no description in src/contract/signed-routes.ts`);
  return unknownRoute(route);
}

function operation(
  route: string,
  contract: SignedRouteContract,
  inputs: OpenApiInputs,
  catalogue: readonly CatalogueEntry[],
): Record<string, unknown> {
  const responses: Record<string, unknown> = {
    '2XX': {
      description:
        "The gateway's answer, unchanged (hop-by-hop headers removed). The spec shows no success status or fields but those named here.",
      headers: answerHeaders(),
      content: { 'application/json': { schema: successSchema(contract) } },
    },
  };
  for (const [status, entries] of groupByStatus(catalogue))
    responses[String(status)] = sidecarResponse(status, entries);
  responses.default = {
    description: `The gateway's answer, unchanged: any status, its own body. Its known error codes (spec 7): ${GATEWAY_CODES.map((c) => `\`${c}\``).join(', ')}.`,
    headers: answerHeaders(),
    content: { 'application/json': { schema: ref('schemas', 'GatewayAnswer') }, '*/*': {} },
  };
  return {
    operationId: operationIdOf(route),
    summary: contract.summary,
    description: `${contract.description}\n\n${gatewayRetries(inputs)}`,
    parameters: [ref('parameters', 'Idempotency-Key'), ref('parameters', 'X-Request-Id')],
    requestBody: {
      required: true,
      description: `A JSON object of at most ${inputs.maxBodyBytes} bytes, \`Content-Type: application/json\` (UTF-8), sent as its exact bytes (base64 in \`data\`, signed).`,
      content: {
        'application/json': {
          schema: ref('schemas', contract.payload.name),
          ...(contract.examples === undefined ? {} : { examples: contract.examples }),
        },
      },
    },
    responses,
  };
}

/**
 * What the sidecar does toward the gateway with one request (README, "Retry contract"; egress/gateway-exchange.ts):
 * the caller's own retries are safe only because of it.
 */
function gatewayRetries(inputs: OpenApiInputs): string {
  const { upstream } = SETTINGS;
  const fields = inputs.answerCorrelationFields.map((field) => `\`${field}\``).join(', ');
  const correlation =
    fields === ''
      ? ''
      : ` So is an answer whose ${fields} differs from the request's (\`${upstream.answerCorrelationFields.env}\`): it may be another request's.`;
  return [
    'Toward the gateway, the sidecar signs every copy it sends afresh (new `X-Timestamp` and `X-Nonce`) and:',
    '(1) after a `401` with `code` `FAILED` (the token refused, nothing done) gets a fresh token and sends once more;',
    'in fleet mode (Redis state store) at most twice more, each token newer; the last refusal comes back as the',
    'answer. (2) Retries a connection that fails before the first byte of the request is written (refused, DNS,',
    'connect timeout, no free connection) with capped, jittered backoff for up to',
    `${inputs.connectRetryDeadlineMs} ms (\`${upstream.connectRetryDeadlineMs.env}\`), then answers`,
    '`502 sidecar.upstream.unreachable` (an untrusted certificate: at once). (3) Never sends it again once a byte',
    'was written: a reset, a timeout or a malformed answer is `502`/`504 sidecar.upstream.outcome_unknown`.' +
      correlation,
    '(4) Retries no other gateway answer (`signature.nonce.replayed`, a `5xx`): it comes back unchanged.',
  ].join(' ');
}

/** `/api/v2/transaction/init` -> `postApiV2TransactionInit`. */
function operationIdOf(route: string): string {
  const words = route.split(/[^A-Za-z0-9]+/).filter((word) => word !== '');
  return `post${words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join('')}`;
}

function successSchema({ answerProperties }: SignedRouteContract): Record<string, unknown> {
  if (answerProperties === undefined) return ref('schemas', 'GatewayAnswer');
  return { allOf: [ref('schemas', 'GatewayAnswer')], type: 'object', properties: answerProperties };
}

function groupByStatus(entries: readonly CatalogueEntry[]): [number, CatalogueEntry[]][] {
  const byStatus = new Map<number, CatalogueEntry[]>();
  for (const entry of entries)
    for (const status of entry.statuses) byStatus.set(status, [...(byStatus.get(status) ?? []), entry]);
  return [...byStatus.entries()].sort(([a], [b]) => a - b);
}

function answerHeaders(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    'X-Request-Id': ref('headers', 'X-Request-Id'),
    'Idempotent-Replayed': ref('headers', 'Idempotent-Replayed'),
    ...extra,
  };
}

/**
 * The answers of one status: one of the sidecar's codes for it, or the gateway's own answer of that status (which a
 * `sidecar.` code never is), replayed or not.
 */
function sidecarResponse(status: number, entries: readonly CatalogueEntry[]): Record<string, unknown> {
  const extra: Record<string, unknown> = {};
  if (status === 409 || status === 503) extra['Retry-After'] = ref('headers', 'Retry-After');
  if (status === 405) extra.Allow = ref('headers', 'Allow');
  const codes = entries.map((entry) => `\`${entry.code}\``).join(', ');
  return {
    description: `The sidecar's ${codes}, or the gateway's own answer of this status, unchanged.`,
    headers: answerHeaders(extra),
    content: {
      'application/json': {
        schema: { oneOf: [...entries.map((entry) => ref('schemas', entry.code)), ref('schemas', 'GatewayAnswer')] },
      },
    },
  };
}

function errorSchema(entry: CatalogueEntry): Record<string, unknown> {
  const sent = entry.retryable
    ? '`retryable: true`: the gateway did not receive the request.'
    : '`retryable: false`: the request may have reached the gateway, or sending it again as it is cannot succeed (docs/clients.md).';
  return {
    type: 'object',
    description: `${entry.message}. Status ${entry.statuses.join(' or ')}. ${sent}`,
    required: ['code', 'message', 'retryable', ...entry.details],
    additionalProperties: false,
    properties: {
      code: { const: entry.code },
      message: { type: 'string' },
      retryable: { const: entry.retryable },
      ...Object.fromEntries(entry.details.map((field) => [field, ERROR_DETAILS[field]])),
    },
  };
}

/** The fields some errors carry besides code, message and retryable. */
const ERROR_DETAILS: Readonly<Record<keyof SidecarErrorDetails, Record<string, unknown>>> = {
  rule: { type: 'string', description: 'The money limit that refused the payment (docs/limits.md).' },
  window: {
    type: 'string',
    description: 'Its window: a period as the rules file writes it (`1h`), `per_minute`, or `payment` (maxAmount).',
    examples: ['24h', 'per_minute', 'payment'],
  },
};

function gatewayAnswerSchema(): Record<string, unknown> {
  return {
    description: `The gateway's body, passed through unchanged: not the sidecar's to describe. It never carries a \`sidecar.\` code. Its error bodies carry \`code\` and \`message\` (spec 2.5, 7).`,
    not: {
      type: 'object',
      required: ['code'],
      properties: { code: { type: 'string', pattern: SIDECAR_CODE_PATTERN } },
    },
    properties: {
      code: { type: 'string', examples: [...GATEWAY_CODES] },
      message: { type: 'string' },
    },
  };
}
