import { createSigner } from '../signing/signer.js';
import { signingString, unixTimestamp } from '../signing/signing-string.js';
import { newNonce } from '../signing/nonce.js';
import { canonicalFullUrl } from '../tools/full-url.js';
import { loadPrivateKeyFile } from '../tools/key-files.js';
import { dataProblem, methodProblem, nonceProblem, payloadProblem, timestampProblem } from '../tools/sign-inputs.js';
import { parseCommandLine, runtimeFailure, usageFailure, type Flags } from '../tools/usage.js';
import { EXIT, type Command } from './command.js';

const USAGE =
  'usage: signing-sidecar sign --url URL (--data B64 | --payload JSON) [--key FILE] [--method POST] [--timestamp T] [--nonce N] [--json]';
const HELP = `${USAGE}

Signs one request exactly as the sidecar would (spec 5.2) and prints the signing string, the headers and the
body, so you can compare byte for byte with your own implementation. Sends nothing.

  --url URL        full URL posted to; canonicalised (lowercase scheme/host, default port and empty "?" dropped)
  --data B64       the body's data string: standard base64 with padding, used exactly as given
  --payload JSON   alternative to --data: the payload text, base64-encoded byte for byte; it must be a JSON
                   object, as the sidecar requires
  --key FILE       PEM RSA private key (default: $SIDECAR_PRIVATE_KEY_FILE)
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
  const keyFile = opts.key ?? env.SIDECAR_PRIVATE_KEY_FILE;
  if (keyFile === undefined || keyFile === '') return '--key is required (or set SIDECAR_PRIVATE_KEY_FILE)';
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
  return { method, url, timestamp, nonce, data, keyFile };
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

export const sign: Command = async (argv, io) => {
  const opts = parseCommandLine(argv, SIGN_FLAGS, io, { usage: USAGE, help: HELP });
  if (typeof opts === 'number') return opts;
  const req = resolve(opts, io.env);
  if (typeof req === 'string') return usageFailure(io, USAGE, req);
  let key;
  try {
    key = await loadPrivateKeyFile(req.keyFile);
  } catch (err) {
    return runtimeFailure(io, (err as Error).message);
  }
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
  const signature = await createSigner(key.key).sign(text);
  io.stdout.write(render(req, text, signature, key.fingerprint, opts.json === true));
  return EXIT.ok;
};
