// Vendor accounts, validated once at start-up the way the gateway validates an upload: a key under 2048 bits,
// a private key sent by mistake or a malformed allowlist entry is refused with a message naming the account.
import { createHash, createPublicKey, timingSafeEqual } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { createAllowList } from './ip-allow.js';
import type { IpAllowList } from './ip-allow.js';

export const MIN_RSA_BITS = 2048;
/** Loopback only by default: a vendor testing locally is allowlisted, nothing else is. */
export const DEFAULT_ALLOW_IPS: readonly string[] = ['127.0.0.1', '::1'];

export interface SimulatorAccountInput {
  /** The vendor account email used in the password grant. */
  readonly username: string;
  readonly password: string;
  /** The vendor's RSA public key, PEM (`PUBLIC KEY` or `RSA PUBLIC KEY` block), at least 2048 bits. */
  readonly publicKeyPem: string;
  /** Allowlisted source addresses or CIDR ranges; default 127.0.0.1 and ::1. */
  readonly allowIps?: readonly string[];
  /** Where postbacks are POSTed; no postbacks when absent. */
  readonly webhookUrl?: string;
  /** Sign postbacks with the simulator's key (spec 6, opt-in per account). Default false. */
  readonly signedPostbacks?: boolean;
}

export interface Account {
  readonly username: string;
  /** Bits of the first public key the account was loaded with. */
  readonly keyBits: number;
  /**
   * The public keys a signature may verify with: one normally, two during a key rotation (the vendor uploads the
   * new key, the client switches to it, the old key is withdrawn).
   */
  publicKeys(): readonly KeyObject[];
  /** Replaces the account's public keys (each checked as at load); throws AccountConfigError and keeps the old. */
  setPublicKeys(pems: readonly string[]): void;
  readonly allowIps: readonly string[];
  readonly allowList: IpAllowList;
  readonly webhookUrl: string | undefined;
  readonly signedPostbacks: boolean;
  /** Constant-time comparison so the simulator does not teach bad habits (or leak via timing). */
  passwordMatches(candidate: string): boolean;
  /** A password rotation: from now on only `password` logs in (tokens already issued stay valid). */
  setPassword(password: string): void;
}

export class AccountConfigError extends Error {
  override readonly name = 'AccountConfigError';
}

export function loadAccounts(inputs: readonly SimulatorAccountInput[]): Map<string, Account> {
  if (inputs.length === 0) throw new AccountConfigError('at least one account is required');
  const accounts = new Map<string, Account>();
  for (const [index, input] of inputs.entries()) {
    const account = loadAccount(input, index);
    if (accounts.has(account.username)) {
      throw new AccountConfigError(`account "${account.username}" is defined twice`);
    }
    accounts.set(account.username, account);
  }
  return accounts;
}

function loadAccount(input: SimulatorAccountInput, index: number): Account {
  const label = typeof input.username === 'string' && input.username !== '' ? input.username : `#${index + 1}`;
  const fail = (why: string): never => {
    throw new AccountConfigError(`account ${label}: ${why}`);
  };
  if (typeof input.username !== 'string' || input.username.trim() === '') fail('username is required');
  if (typeof input.password !== 'string' || input.password === '') fail('password is required');
  const { key, bits } = parsePublicKey(input.publicKeyPem, fail);
  const allowIps = input.allowIps ?? DEFAULT_ALLOW_IPS;
  let allowList: IpAllowList;
  try {
    allowList = createAllowList(allowIps);
  } catch (err) {
    return fail(`allowIps: ${(err as Error).message}`);
  }
  const webhookUrl = input.webhookUrl === undefined || input.webhookUrl === '' ? undefined : input.webhookUrl;
  if (webhookUrl !== undefined) checkWebhookUrl(webhookUrl, fail);
  let passwordDigest = sha256(input.password);
  let publicKeys: readonly KeyObject[] = [key];
  return {
    username: input.username,
    keyBits: bits,
    publicKeys: () => publicKeys,
    setPublicKeys: (pems) => {
      if (pems.length === 0) fail('at least one public key is required');
      publicKeys = pems.map((pem) => parsePublicKey(pem, fail).key);
    },
    allowIps: [...allowIps],
    allowList,
    webhookUrl,
    signedPostbacks: input.signedPostbacks === true,
    passwordMatches: (candidate) => timingSafeEqual(sha256(candidate), passwordDigest),
    setPassword: (password) => {
      if (password === '') fail('password is required');
      passwordDigest = sha256(password);
    },
  };
}

function parsePublicKey(pem: unknown, fail: (why: string) => never): { key: KeyObject; bits: number } {
  if (typeof pem !== 'string' || pem.trim() === '') return fail('public key PEM is required');
  if (pem.includes('PRIVATE KEY')) return fail('this is a private key; upload only the public key block');
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: 'pem' });
  } catch {
    return fail('public key is not a valid PEM public key');
  }
  // rsa-pss keys cannot make the PKCS#1 v1.5 signatures the spec requires, so only plain RSA is accepted.
  if (key.asymmetricKeyType !== 'rsa') return fail(`public key is ${key.asymmetricKeyType ?? 'unknown'}, not RSA`);
  const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
  if (bits < MIN_RSA_BITS) return fail(`public key has ${bits} bits; at least ${MIN_RSA_BITS} are required`);
  return { key, bits };
}

function checkWebhookUrl(raw: string, fail: (why: string) => never): void {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return fail(`webhookUrl "${raw}" is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') fail('webhookUrl must be http:// or https://');
  if (url.hash !== '') fail('webhookUrl must not carry a fragment');
}

function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}
