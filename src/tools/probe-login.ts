import type { Config } from '../config/config.js';
import { maskSecrets, type Secret } from '../config/secret.js';
import { passwordGrant, TOKEN_PATH } from '../token/token-client.js';
import { UndiciGatewayClient } from '../upstream/gateway-client.js';
import { errorCode } from '../upstream/upstream-errors.js';
import type { CheckMark } from './check-report.js';
import type { SkewSample } from './clock-skew.js';

export interface LoginResult {
  readonly mark: CheckMark;
  readonly detail: string;
  /** The answer's Date header with local send/receive times, for the clock check; undefined without an answer. */
  readonly skew: SkewSample | undefined;
}

// The gateway's message is shown to help the operator, but bounded: it is untrusted text in a terminal.
const MAX_MESSAGE_CHARS = 200;

function field(body: unknown, name: string): string | undefined {
  const value = (body as Record<string, unknown> | null)?.[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * code/message of an error answer, with the password masked in case the gateway echoes the request (the same
 * masking as serve's; serve keeps only the code). Masked before it is cut: a cut could split the password.
 */
function errorSummary(body: unknown, password: Secret): string {
  const [code, message] = [field(body, 'code'), field(body, 'message')].map((text) =>
    text === undefined ? undefined : maskSecrets(text, [password]).slice(0, MAX_MESSAGE_CHARS),
  );
  const parts = [code === undefined ? undefined : `code ${code}`, message === undefined ? undefined : `"${message}"`];
  return parts.filter((p) => p !== undefined).join(', ') || 'no code/message in the body';
}

function verdict(status: number, body: unknown, config: Config): Omit<LoginResult, 'skew'> {
  const who = `as ${config.username}`;
  if (status === 200 && field(body, 'access_token') !== undefined) {
    const expires = field(body, 'access_token_expires_at') ?? 'an unstated time';
    return { mark: '✔', detail: `${who}: access token issued, valid until ${expires}` };
  }
  const summary = errorSummary(body, config.password);
  const hint =
    status === 403
      ? " (this host's outbound IP is probably not on the allowlist: spec 5.3)"
      : status === 401
        ? ' (wrong username or password, or the account is not enabled for v2)'
        : status === 200
          ? ' (HTTP 200 but no access_token in the body)'
          : '';
  return { mark: '✘', detail: `${who}: HTTP ${status}, ${summary}${hint}` };
}

/**
 * POSTs the password grant (spec 4.1) once, through the same gateway client, path and body as `serve`. Also records
 * the Date header and local timing for the skew check, which works even when the login is refused. The tokens
 * in the answer are discarded unprinted.
 */
export async function probeLogin(config: Config): Promise<LoginResult> {
  const gatewayClient = new UndiciGatewayClient(config.base, { ...config.upstream, connections: 1 });
  const path = `${config.base.pathPrefix}${TOKEN_PATH}`;
  try {
    const sentMs = Date.now();
    const outcome = await gatewayClient.send({
      path,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(passwordGrant(config.username, config.password)),
    });
    const receivedMs = Date.now();
    if (outcome.kind !== 'response') {
      const code = errorCode(outcome.error) ?? outcome.error.message;
      return {
        mark: '✘',
        detail: `as ${config.username}: no answer from ${config.base.origin}${path} (${code})`,
        skew: undefined,
      };
    }
    const { status, headers, body } = outcome.response;
    const date = headers.date;
    const skew = typeof date === 'string' ? { dateHeader: date, sentMs, receivedMs } : undefined;
    return { ...verdict(status, parseBody(body), config), skew };
  } finally {
    await gatewayClient.close();
  }
}

function parseBody(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return null;
  }
}
