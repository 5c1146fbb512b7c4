// Vendor accounts, validated once at start-up the way the gateway validates an upload: a key under 2048 bits,
// a private key sent by mistake or a malformed allowlist entry is refused with a message naming the account.
import { createHash, createPublicKey, timingSafeEqual } from 'node:crypto';
import { createAllowList } from './ip-allow.js';
export const MIN_RSA_BITS = 2048;
/** Loopback only by default: a vendor testing locally is allowlisted, nothing else is. */
export const DEFAULT_ALLOW_IPS = ['127.0.0.1', '::1'];
export class AccountConfigError extends Error {
    name = 'AccountConfigError';
}
export function loadAccounts(inputs) {
    if (inputs.length === 0)
        throw new AccountConfigError('at least one account is required');
    const accounts = new Map();
    for (const [index, input] of inputs.entries()) {
        const account = loadAccount(input, index);
        if (accounts.has(account.username)) {
            throw new AccountConfigError(`account "${account.username}" is defined twice`);
        }
        accounts.set(account.username, account);
    }
    return accounts;
}
function loadAccount(input, index) {
    const label = typeof input.username === 'string' && input.username !== '' ? input.username : `#${index + 1}`;
    const fail = (why) => {
        throw new AccountConfigError(`account ${label}: ${why}`);
    };
    if (typeof input.username !== 'string' || input.username.trim() === '')
        fail('username is required');
    if (typeof input.password !== 'string' || input.password === '')
        fail('password is required');
    const { key, bits } = parsePublicKey(input.publicKeyPem, fail);
    const allowIps = input.allowIps ?? DEFAULT_ALLOW_IPS;
    let allowList;
    try {
        allowList = createAllowList(allowIps);
    }
    catch (err) {
        return fail(`allowIps: ${err.message}`);
    }
    const webhookUrl = input.webhookUrl === undefined || input.webhookUrl === '' ? undefined : input.webhookUrl;
    if (webhookUrl !== undefined)
        checkWebhookUrl(webhookUrl, fail);
    const passwordDigest = sha256(input.password);
    return {
        username: input.username,
        publicKey: key,
        keyBits: bits,
        allowIps: [...allowIps],
        allowList,
        webhookUrl,
        signedPostbacks: input.signedPostbacks === true,
        passwordMatches: (candidate) => timingSafeEqual(sha256(candidate), passwordDigest),
    };
}
function parsePublicKey(pem, fail) {
    if (typeof pem !== 'string' || pem.trim() === '')
        return fail('public key PEM is required');
    if (pem.includes('PRIVATE KEY'))
        return fail('this is a private key; upload only the public key block');
    let key;
    try {
        key = createPublicKey({ key: pem, format: 'pem' });
    }
    catch {
        return fail('public key is not a valid PEM public key');
    }
    // rsa-pss keys cannot make the PKCS#1 v1.5 signatures the spec requires, so only plain RSA is accepted.
    if (key.asymmetricKeyType !== 'rsa')
        return fail(`public key is ${key.asymmetricKeyType ?? 'unknown'}, not RSA`);
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS)
        return fail(`public key has ${bits} bits; at least ${MIN_RSA_BITS} are required`);
    return { key, bits };
}
function checkWebhookUrl(raw, fail) {
    let url;
    try {
        url = new URL(raw);
    }
    catch {
        return fail(`webhookUrl "${raw}" is not an absolute URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
        fail('webhookUrl must be http:// or https://');
    if (url.hash !== '')
        fail('webhookUrl must not carry a fragment');
}
function sha256(value) {
    return createHash('sha256').update(value, 'utf8').digest();
}
