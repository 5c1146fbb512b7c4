import { ConfigError } from '../errors.js';
import { publicKeyFingerprint } from '../signing/keys.js';
import { loadPkcs11Binding } from '../signing/pkcs11-binding.js';
import { startPkcs11Signer, type Pkcs11Signer } from '../signing/pkcs11-signer.js';
import { createSigner, type SwappableSigner } from '../signing/signer.js';
import { pkcs11SettingsFromEnv } from '../tools/pkcs11-settings.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import { newNonce } from '../signing/nonce.js';
import { canonicalFullUrl } from '../tools/full-url.js';
import { loadPrivateKeyFile } from '../tools/key-files.js';
import { dataProblem, methodProblem, nonceProblem, payloadProblem, timestampProblem } from '../tools/sign-inputs.js';
import { parseCommandLine, runtimeFailure, usageFailure, type Flags } from '../tools/usage.js';
import { EXIT, type Command } from '../tools/command.js';

const USAGE =
  'usage: signing-sidecar sign --url URL (--data B64 | --payload JSON) [--key FILE] [--method POST] [--timestamp T] [--nonce N] [--json]';
const HELP = `${USAGE}

Signs one request exactly as the sidecar would (spec 5.2) and prints the signing string, the headers and the
body, so you can compare byte for byte with your own implementation. Sends nothing.

  --url URL        full URL posted to; canonicalised (lowercase scheme/host, default port and empty "?" dropped)
  --data B64       the body's data string: standard base64 with padding, used exactly as given
  --payload JSON   alternative to --data: the payload text, base64-encoded byte for byte; it must be a JSON
                   object, as the sidecar requires
  --key FILE       PEM RSA private key (default: $SIDECAR_PRIVATE_KEY_FILE; with SIDECAR_SIGNER=pkcs11 and no
                   --key, the PKCS#11 token of the SIDECAR_PKCS11_* settings signs, as \`serve\` would)
  --method M       HTTP method, uppercase (default POST)
  --timestamp T    X-Timestamp, Unix seconds (default: now)
  --nonce N        X-Nonce, 16-64 of [A-Za-z0-9_-] (default: 16 random bytes, base64url)
  --json           print one JSON object instead of text

Exit codes: 0 signed, 1 the key cannot be used, 2 bad usage.
`;

const SIGN_FLAGS = {
  url: { type: 'string' },
  data: { type: 'string' },
  payload: { type: 'string' },
  key: { type: 'string' },
  method: { type: 'string' },
  timestamp: { type: 'string' },
  nonce: { type: 'string' },
  json: { type: 'boolean' },
} as const;
type SignOptions = Flags<typeof SIGN_FLAGS>;

interface Request {
  method: string;
  url: string;
  timestamp: string;
  nonce: string;
  data: string;
  keyFile: string;
}

function resolve(opts: SignOptions, env: NodeJS.ProcessEnv): Request | string {
  if (opts.url === undefined) return '--url is required';
  if ((opts.data === undefined) === (opts.payload === undefined)) return 'give exactly one of --data or --payload';
  const pkcs11 = opts.key === undefined && env.SIDECAR_SIGNER === 'pkcs11';
  const keyFile = pkcs11 ? '' : (opts.key ?? env.SIDECAR_PRIVATE_KEY_FILE);
  if (!pkcs11 && (keyFile === undefined || keyFile === ''))
    return '--key is required (or set SIDECAR_PRIVATE_KEY_FILE, or SIDECAR_SIGNER=pkcs11 and its settings)';
  const method = opts.method ?? 'POST';
  const data = opts.data ?? Buffer.from(opts.payload ?? '', 'utf8').toString('base64');
  const timestamp = opts.timestamp ?? unixTimestamp(Date.now());
  const nonce = opts.nonce ?? newNonce();
  const problem =
    (opts.payload === undefined ? undefined : prefixed('--payload', payloadProblem(opts.payload))) ??
    methodProblem(method) ??
    timestampProblem(timestamp) ??
    prefixed('--nonce', nonceProblem(nonce)) ??
    prefixed('--data', dataProblem(data));
  if (problem !== undefined) return problem;
  let url: string;
  try {
    url = canonicalFullUrl(opts.url).url;
  } catch (err) {
    return `--url: ${(err as Error).message}`;
  }
  return { method, url, timestamp, nonce, data, keyFile: keyFile ?? '' };
}

function prefixed(flag: string, problem: string | undefined): string | undefined {
  return problem === undefined ? undefined : `${flag} ${problem}`;
}

function render(req: Request, text: string, signature: string, fingerprint: string, json: boolean): string {
  const headers = { 'X-Timestamp': req.timestamp, 'X-Nonce': req.nonce, 'X-Signature': signature };
  const body = JSON.stringify({ data: req.data });
  if (json) {
    return `${JSON.stringify({ method: req.method, url: req.url, signingString: text, headers, body, keyFingerprint: fingerprint }, null, 2)}\n`;
  }
  return [
    'signing string:',
    text,
    '',
    'headers:',
    `${req.method} ${req.url}`,
    'Content-Type: application/json',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
    '',
    'body:',
    body,
    '',
    `key fingerprint (SHA-256 of SPKI DER): ${fingerprint}`,
    '',
  ].join('\n');
}

/** The key file's signer, or (keyFile empty) the PKCS#11 token's; a string says why neither can sign. */
async function signerOf(
  keyFile: string,
  env: NodeJS.ProcessEnv,
): Promise<{ signer: SwappableSigner | Pkcs11Signer; fingerprint: string } | string> {
  if (keyFile !== '') {
    try {
      const key = await loadPrivateKeyFile(keyFile);
      return { signer: createSigner(key.key), fingerprint: key.fingerprint };
    } catch (err) {
      return (err as Error).message;
    }
  }
  const settings = pkcs11SettingsFromEnv(env);
  if ('errors' in settings) return settings.errors.map((err) => err.message).join('; ');
  const ignore = (): void => undefined;
  try {
    const signer = startPkcs11Signer(
      settings.config,
      { onDown: ignore, onReopenFailed: ignore, onUp: ignore },
      loadPkcs11Binding(),
    );
    return { signer, fingerprint: publicKeyFingerprint(signer.key.publicKey) };
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
}

export const sign: Command = async (argv, io) => {
  const opts = parseCommandLine(argv, SIGN_FLAGS, io, { usage: USAGE, help: HELP });
  if (typeof opts === 'number') return opts;
  const req = resolve(opts, io.env);
  if (typeof req === 'string') return usageFailure(io, USAGE, req);
  const signer = await signerOf(req.keyFile, io.env);
  if (typeof signer === 'string') return runtimeFailure(io, signer);
  if (opts.url !== undefined && opts.url.trim() !== req.url) {
    io.stderr.write(`note: URL canonicalised by spec 5.2: ${opts.url.trim()} -> ${req.url}\n`);
  }
  const text = signingString({
    method: req.method,
    fullUrl: req.url,
    timestamp: req.timestamp,
    nonce: req.nonce,
    data: req.data,
  });
  let signature: string;
  try {
    signature = await signer.signer.sign(text);
  } catch {
    return runtimeFailure(io, 'the PKCS#11 token did not sign');
  } finally {
    if (signer.signer.kind === 'pkcs11') signer.signer.stop();
  }
  io.stdout.write(render(req, text, signature, signer.fingerprint, opts.json === true));
  return EXIT.ok;
};
