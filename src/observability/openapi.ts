// The egress listener's contract as an OpenAPI 3.1 document (docs/clients.md), built from the code's own
// declarations: the signed routes configured, the error catalogue (src/errors.ts: code, status, retryable, message)
// and the headers the listener reads and writes. Never written by hand: `npm run docs:openapi` writes docs/openapi.json from the
// defaults (a test fails when it is stale), and the admin listener serves GET /openapi.json for the routes this
// sidecar was configured with. Internal services generate clients from it (docs/clients.md).
import type { Config } from '../config/config.js';
import { SETTINGS } from '../config/schema.js';
import { packageVersion } from '../version.js';
import { sidecarErrors, type SidecarError, type SidecarErrorCode } from '../errors.js';

type Factories = typeof sidecarErrors;
type FactoryName = keyof Factories;

/**
 * Factories whose arguments shape the answer (its status or message): each needs its sample arguments below, one set
 * per answer it can make. A factory taking nothing, or only a cause (never sent to the caller), is called bare, so a
 * code added to the catalogue appears in the document by itself; one taking anything else fails the typecheck here
 * until it is given its samples.
 */
type ShapedByArguments = {
  [K in FactoryName]: CalledBare<Parameters<Factories[K]>> extends true ? never : K;
}[FactoryName];
type CalledBare<P> = P extends [] ? true : P extends [(infer Only)?] ? (unknown extends Only ? true : false) : false;

/** The answers of the factories of ShapedByArguments. */
function shapedAnswers(maxBodyBytes: number): { readonly [K in ShapedByArguments]: readonly SidecarError[] } {
  return {
    methodNotAllowed: [sidecarErrors.methodNotAllowed('POST')],
    tooLarge: [sidecarErrors.tooLarge(maxBodyBytes)],
    outcomeUnknown: [sidecarErrors.outcomeUnknown(502, undefined), sidecarErrors.outcomeUnknown(504, undefined)],
  };
}

/** One code of the catalogue as the caller sees it: every status it comes with. */
export interface CatalogueEntry {
  readonly code: SidecarErrorCode;
  readonly statuses: readonly number[];
  readonly retryable: boolean;
  /** The message it is sent with (with this sidecar's values, where the message carries one). */
  readonly message: string;
}

/** Every code the sidecar can answer with, from its factories (src/errors.ts), in catalogue order. */
export function errorCatalogue(maxBodyBytes: number = SETTINGS.maxBodyBytes.default): readonly CatalogueEntry[] {
  const shaped: Partial<Record<FactoryName, readonly SidecarError[]>> = shapedAnswers(maxBodyBytes);
  const byCode = new Map<SidecarErrorCode, CatalogueEntry>();
  for (const name of Object.keys(sidecarErrors) as FactoryName[]) {
    const answers = shaped[name] ?? [(sidecarErrors[name] as (cause?: unknown) => SidecarError)(undefined)];
    for (const { code, status, retryable, message } of answers) {
      const known = byCode.get(code);
      if (known && known.retryable !== retryable) throw new Error(`${code}: retryable both ways in the catalogue`);
      const statuses = [...(known?.statuses ?? []), status].filter((s, i, all) => all.indexOf(s) === i);
      byCode.set(code, { code, statuses, retryable, message: known?.message ?? message });
    }
  }
  return [...byCode.values()];
}

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

/** What each signed route is, for the routes the schema ships; another configured route gets a generic text. */
export const ROUTE_DESCRIPTIONS: Readonly<Record<string, { readonly summary: string; readonly description: string }>> =
  {
    '/api/v2/transaction/init': {
      summary: 'Initiate a deposit',
      description:
        "The gateway's deposit init (spec 4.2). The body is the deposit payload (spec 2.3: `amount`, `currency`, `gateway`, `user_id`, `invoice_no`, all strings); the sidecar wraps, signs and sends it. The gateway's answer contains `transaction_link`, the address the customer is sent to.",
    },
    '/api/v2/transfer-out/init': {
      summary: 'Initiate a withdrawal',
      description:
        "The gateway's withdrawal init (spec 4.3). The body is the withdrawal payload, whose fields the spec does not show; the sidecar wraps, signs and sends it.",
    },
  };

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
    serverUrl,
    version: packageVersion(),
  };
}

/** The inputs of the document in docs/openapi.json: the schema's defaults. */
export function defaultOpenApiInputs(version: string): OpenApiInputs {
  const { host, port } = SETTINGS.listen;
  return {
    signedRoutes: SETTINGS.signedRoutes.default,
    maxBodyBytes: SETTINGS.maxBodyBytes.default,
    idempotencyRequired: SETTINGS.idempotency.required.default,
    serverUrl: `http://${host.default}:${port.default}`,
    version,
  };
}

const ref = (kind: 'schemas' | 'headers' | 'parameters' | 'responses', name: string) => ({
  $ref: `#/components/${kind}/${name}`,
});

const SIDECAR_CODE_PATTERN = '^sidecar\\.';

/**
 * The document. `strictRoutes`: a signed route without an entry in ROUTE_DESCRIPTIONS is an error (the committed
 * document, made from the schema's defaults); served for a configured route, it gets a generic description instead.
 */
export function openApiDocument(inputs: OpenApiInputs, strictRoutes = false): Record<string, unknown> {
  const catalogue = errorCatalogue(inputs.maxBodyBytes);
  const onRoutes = catalogue.filter((entry) => !OUTSIDE_SIGNED_ROUTES.includes(entry.code));
  const offRoutes = catalogue.filter(
    (entry) => OUTSIDE_SIGNED_ROUTES.includes(entry.code) || BEFORE_ROUTING.includes(entry.code),
  );
  const paths = Object.fromEntries(
    inputs.signedRoutes.map((route) => [route, { post: operation(route, inputs, onRoutes, strictRoutes) }]),
  );
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
        '`421`/`403` on every path: these are `components.responses.unrouted-<status>`. How to call and retry:',
        'docs/clients.md.',
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
    components: {
      schemas: {
        ...Object.fromEntries(catalogue.map((entry) => [entry.code, errorSchema(entry)])),
        GatewayAnswer: gatewayAnswerSchema(),
        Payload: {
          type: 'object',
          description:
            "The gateway's payload as plain JSON: a JSON object, sent as its exact bytes (base64 in `data`, signed).",
          additionalProperties: true,
        },
      },
      parameters: {
        'Idempotency-Key': {
          name: 'Idempotency-Key',
          in: 'header',
          required: inputs.idempotencyRequired,
          description:
            'One key per payment, stored before the first attempt: a retry with it is answered from the record, never sent twice (docs/idempotency.md). Never forwarded.',
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

function operation(
  route: string,
  inputs: OpenApiInputs,
  catalogue: readonly CatalogueEntry[],
  strictRoutes: boolean,
): Record<string, unknown> {
  const described = ROUTE_DESCRIPTIONS[route];
  if (described === undefined && strictRoutes)
    throw new Error(`signed route ${route} has no description in src/observability/openapi.ts (ROUTE_DESCRIPTIONS)`);
  const { summary, description } = described ?? {
    summary: `Signed POST ${route}`,
    description: `Signed and sent to the gateway's ${route}; its answer comes back unchanged.`,
  };
  const responses: Record<string, unknown> = {
    '2XX': {
      description:
        "The gateway's answer, unchanged (hop-by-hop headers removed). The spec shows no success status; the deposit's answer contains `transaction_link`.",
      headers: answerHeaders(),
      content: { 'application/json': { schema: successSchema(route) } },
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
    summary,
    description,
    parameters: [ref('parameters', 'Idempotency-Key'), ref('parameters', 'X-Request-Id')],
    requestBody: {
      required: true,
      description: `A JSON object of at most ${inputs.maxBodyBytes} bytes, \`Content-Type: application/json\` (UTF-8).`,
      content: { 'application/json': { schema: ref('schemas', 'Payload') } },
    },
    responses,
  };
}

/** `/api/v2/transaction/init` -> `postApiV2TransactionInit`. */
function operationIdOf(route: string): string {
  const words = route.split(/[^A-Za-z0-9]+/).filter((word) => word !== '');
  return `post${words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join('')}`;
}

function successSchema(route: string): Record<string, unknown> {
  if (route !== '/api/v2/transaction/init') return ref('schemas', 'GatewayAnswer');
  return {
    allOf: [ref('schemas', 'GatewayAnswer')],
    type: 'object',
    properties: { transaction_link: { type: 'string', description: 'Where the customer completes the payment.' } },
  };
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
    required: ['code', 'message', 'retryable'],
    additionalProperties: false,
    properties: {
      code: { const: entry.code },
      message: { type: 'string' },
      retryable: { const: entry.retryable },
    },
  };
}

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
