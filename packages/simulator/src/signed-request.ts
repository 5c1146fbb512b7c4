// The checks every signed endpoint runs, in this strict order: source IP, bearer token, signature
// headers present and well formed, timestamp window, nonce format, signature, nonce replay, envelope.
// The body has to be read (and its `data` string found) before the signature can be checked at all; those
// parsing refusals are therefore 400s that come just before the signature check (documented assumption).
import type { IncomingMessage } from 'node:http';
import { decodeStrictBase64, describeBase64Problem } from './base64.js';
import { signedUrlFor } from './canonical-url.js';
import { SimError, badRequest, signatureError } from './errors.js';
import { duplicateTopLevelKey } from './json-keys.js';
import { parseJsonObject, readBody, requireJsonContentType } from './http-io.js';
import { buildSigningString, signingStringDigest, verifySignature } from './verifier.js';
import { normalizeAddress } from './ip-allow.js';
import type { Account } from './accounts.js';
import type { RequestInfo, SimContext } from './context.js';

export const TIMESTAMP_MAX_BEHIND_SECONDS = 60;
export const TIMESTAMP_MAX_AHEAD_SECONDS = 5;
const NONCE_FORMAT = /^[A-Za-z0-9_-]{16,64}$/;
/** Decimal digits without leading zeros: "0170..." is not how any clock prints Unix time, so it is malformed. */
const TIMESTAMP_FORMAT = /^(?:0|[1-9]\d{0,19})$/;

export interface VerifiedRequest {
  readonly account: Account;
  /** The decoded JSON payload from `data`. */
  readonly payload: Record<string, unknown>;
}

interface SignatureHeaders {
  readonly timestamp: string;
  readonly nonce: string;
  readonly signature: Buffer;
}

export async function verifySignedRequest(
  ctx: SimContext,
  req: IncomingMessage,
  info: RequestInfo,
): Promise<VerifiedRequest> {
  const token = bearerToken(req);
  checkSourceIp(ctx, info, token === undefined ? undefined : ctx.tokens.ownerOf(token));
  const account = checkAccessToken(ctx, token);
  info.account = account.username;
  const headers = readSignatureHeaders(req);
  checkTimestamp(ctx, headers.timestamp);
  if (!NONCE_FORMAT.test(headers.nonce)) {
    throw signatureError('signature.nonce.invalid', 'X-Nonce must be 16 to 64 characters from [A-Za-z0-9_-]', {
      nonceLength: headers.nonce.length,
    });
  }
  requireJsonContentType(req);
  const raw = await readBody(req, ctx.maxBodyBytes);
  const envelope = parseJsonObject(raw);
  // JSON.parse keeps the last of two "data" keys; another parser may keep the first. Refusing the ambiguity
  // means the payload we act on is certainly the one that was signed.
  const duplicate = duplicateTopLevelKey(raw);
  if (duplicate !== undefined) throw badRequest('envelope.invalid', `envelope has the key "${duplicate}" twice`);
  const data = envelope.data;
  if (typeof data !== 'string') throw badRequest('envelope.invalid', 'body must be {"data": "<base64 string>"}');
  await checkSignature(ctx, req, account, headers, data);
  if (!ctx.nonces.claim(account.username, headers.nonce)) {
    throw signatureError('signature.nonce.replayed', 'X-Nonce was already used by this account within 95 s', {
      nonce: headers.nonce,
    });
  }
  return { account, payload: openEnvelope(envelope, data) };
}

function bearerToken(req: IncomingMessage): string | undefined {
  const match = /^Bearer +(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return match?.[1];
}

export function checkSourceIp(ctx: SimContext, info: RequestInfo, username: string | undefined): void {
  const account = username === undefined ? undefined : ctx.accounts.get(username);
  const list = account?.allowList ?? ctx.anyAccountAllows;
  if (list.allows(info.ip)) return;
  const ip = info.ip === undefined ? 'unknown' : normalizeAddress(info.ip);
  const whose = account === undefined ? 'any account' : `account ${account.username}`;
  throw new SimError(403, 'ip.forbidden', `source address ${ip} is not allowlisted for ${whose}`, {
    allowlisted: account === undefined ? 'any account' : account.allowIps.join(','),
  });
}

function checkAccessToken(ctx: SimContext, token: string | undefined): Account {
  if (token === undefined) {
    throw new SimError(401, 'FAILED', 'missing "Authorization: Bearer <access token>" header');
  }
  const check = ctx.tokens.checkAccess(token);
  if (!check.ok) {
    const why = {
      unknown: 'access token is not valid',
      expired: 'access token has expired',
      superseded: 'access token was superseded by a newer password login',
      rotated: 'access token is not valid',
    }[check.reason];
    throw new SimError(401, 'FAILED', why, { tokenProblem: check.reason });
  }
  const account = ctx.accounts.get(check.username);
  if (account === undefined) throw new SimError(401, 'FAILED', 'access token is not valid');
  return account;
}

function readSignatureHeaders(req: IncomingMessage): SignatureHeaders {
  const get = (name: string): string | undefined => {
    const value = req.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  };
  const timestamp = get('x-timestamp');
  const nonce = get('x-nonce');
  const signature = get('x-signature');
  const missing = [
    timestamp === undefined ? 'X-Timestamp' : '',
    nonce === undefined ? 'X-Nonce' : '',
    signature === undefined ? 'X-Signature' : '',
  ].filter((h) => h !== '');
  if (timestamp === undefined || nonce === undefined || signature === undefined) {
    throw signatureError('signature.header.missing', `missing header(s): ${missing.join(', ')}`);
  }
  if (!TIMESTAMP_FORMAT.test(timestamp)) {
    throw signatureError(
      'signature.header.invalid',
      'X-Timestamp must be Unix time in seconds as decimal ASCII digits without leading zeros ' +
        '(not milliseconds, not ISO 8601)',
    );
  }
  const bytes = decodeStrictBase64(signature);
  if (bytes === undefined) {
    throw signatureError(
      'signature.header.invalid',
      `X-Signature must be standard base64 with padding: ${describeBase64Problem(signature)}`,
    );
  }
  return { timestamp, nonce, signature: bytes };
}

function checkTimestamp(ctx: SimContext, timestamp: string): void {
  const now = ctx.clock.nowSeconds();
  const ts = Number(timestamp);
  if (now - ts > TIMESTAMP_MAX_BEHIND_SECONDS) {
    throw signatureError('signature.timestamp.expired', `X-Timestamp is ${now - ts} s behind server time (max 60 s)`, {
      serverTime: now,
      timestamp,
    });
  }
  if (ts - now > TIMESTAMP_MAX_AHEAD_SECONDS) {
    const hint = timestamp.length >= 13 ? ' (it looks like milliseconds; send seconds)' : '';
    throw signatureError(
      'signature.timestamp.future',
      `X-Timestamp is ${ts - now} s ahead of server time (max 5 s)${hint}`,
      { serverTime: now, timestamp },
    );
  }
}

async function checkSignature(
  ctx: SimContext,
  req: IncomingMessage,
  account: Account,
  headers: SignatureHeaders,
  data: string,
): Promise<void> {
  const fullUrl = signedUrlFor(ctx.base(), req.url ?? '/');
  const signingString = buildSigningString({ method: req.method ?? 'POST', fullUrl, ...headers, data });
  for (const publicKey of account.publicKeys()) {
    if (await verifySignature(publicKey, signingString, headers.signature)) return;
  }
  // The URL goes into the message: a wrong base address (environment mismatch) is the commonest cause.
  throw signatureError(
    'signature.verify.failed',
    `signature does not verify with the account's public key(s); the server signed URL is ${fullUrl}`,
    { signedUrl: fullUrl, signingStringSha256: signingStringDigest(signingString) },
  );
}

function openEnvelope(envelope: Record<string, unknown>, data: string): Record<string, unknown> {
  const extra = Object.keys(envelope).filter((key) => key !== 'data');
  if (extra.length > 0) {
    throw badRequest('envelope.invalid', `envelope must carry only "data"; unexpected field(s): ${extra.join(', ')}`);
  }
  const bytes = decodeStrictBase64(data);
  if (bytes === undefined) {
    throw badRequest(
      'envelope.data.invalid_base64',
      `"data" must be standard base64 with padding: ${describeBase64Problem(data)}`,
    );
  }
  return parseJsonObject(bytes, 'envelope.data.invalid_json', 'decoded "data"');
}
