import type { Readable } from 'node:stream';
import { MIN_RSA_BITS } from '../config/private-key.js';
import { canonicalFullUrl, type CanonicalUrl } from '../tools/full-url.js';
import { captureUrl, parseCapture, type CapturedRequest } from '../tools/http-capture.js';
import { loadPublicKeyFile, type LoadedKey } from '../tools/key-files.js';
import { readInput } from '../tools/read-input.js';
import { diagnose } from '../tools/signature-diagnosis.js';
import { parseCommandLine, runtimeFailure, usageFailure, type Flags } from '../tools/usage.js';
import { EXIT, type Command, type CommandIo, type ExitCode } from '../tools/command.js';

const USAGE =
  'usage: signing-sidecar verify --public-key FILE [--request FILE|-] [--url URL] [--scheme https|http] [--now UNIX_SECONDS]';
const HELP = `${USAGE}

Checks the signature of one captured request (a request to the gateway, or a signed postback from it) and,
when it does not verify, names the checks that could explain why. Prints the signing string rebuilt by spec 5.2.

  --public-key FILE  PEM public key that should verify it (yours for requests, the gateway's for postbacks)
  --request FILE     the capture; "-" or absent reads standard input. Either raw HTTP text:
                       POST /api/v2/transaction/init HTTP/1.1
                       Host: gateway.example.com
                       X-Timestamp: ...   X-Nonce: ...   X-Signature: ...
                       (blank line)
                       {"data":"..."}
                     or JSON: {"method":"POST","url":"https://...","headers":{...},"body":"{\\"data\\":...}"}
  --url URL          the full URL posted to (default: the JSON url, an absolute request target, or Host + target)
  --scheme S         scheme used with the Host header when no URL is given (default https)
  --now T            judge the timestamp window at Unix time T instead of now (e.g. the capture time)

Exit codes: 0 the signature verifies, 1 it does not (or inputs unreadable), 2 bad usage.
`;

const VERIFY_FLAGS = {
  'public-key': { type: 'string' },
  request: { type: 'string' },
  url: { type: 'string' },
  scheme: { type: 'string' },
  now: { type: 'string' },
} as const;
type VerifyOptions = Flags<typeof VERIFY_FLAGS>;

function usageProblem(opts: VerifyOptions): string | undefined {
  if (opts['public-key'] === undefined) return '--public-key is required';
  if (opts.scheme !== undefined && opts.scheme !== 'https' && opts.scheme !== 'http')
    return '--scheme must be https or http';
  if (opts.now !== undefined && !/^\d{1,12}$/.test(opts.now)) return '--now must be Unix seconds';
  return undefined;
}

interface Loaded {
  readonly key: LoadedKey;
  readonly capture: CapturedRequest;
  readonly url: CanonicalUrl;
}

async function load(opts: VerifyOptions, stdin: () => Readable): Promise<Loaded> {
  const key = await loadPublicKeyFile(opts['public-key'] ?? '');
  const capture = parseCapture(await readInput(opts.request ?? '-', stdin));
  const url = canonicalFullUrl(captureUrl(capture, opts.url, opts.scheme ?? 'https'));
  return { key, capture, url };
}

function report(io: CommandIo, loaded: Loaded, nowSeconds: number): ExitCode {
  const { key, capture, url } = loaded;
  const header = (name: string): string => capture.headers.get(name) ?? '';
  const missing = ['x-timestamp', 'x-nonce', 'x-signature'].filter((h) => !capture.headers.has(h));
  const out: string[] = [`request: ${capture.method.toUpperCase()} ${url.url}`];
  out.push(`public key: RSA ${key.bits} bits, fingerprint ${key.fingerprint}`);
  if (key.bits < MIN_RSA_BITS) out.push(`! the gateway refuses keys under ${MIN_RSA_BITS} bits`);
  if (missing.length > 0) {
    out.push(`✘ missing header(s): ${missing.join(', ')} (unsigned: signing may not be enabled for this account)`);
    io.stdout.write(`${out.join('\n')}\n`);
    return EXIT.failed;
  }
  const request = {
    method: capture.method,
    url,
    timestamp: header('x-timestamp'),
    nonce: header('x-nonce'),
    signature: header('x-signature'),
    rawBody: capture.body,
  };
  const result = diagnose(request, key.key, nowSeconds);
  out.push('signing string (rebuilt by spec 5.2):', result.signingString);
  out.push(...result.findings.map((f) => `${f.mark} ${f.text}`));
  out.push(
    result.accepted
      ? 'result: signature VERIFIES'
      : result.verified
        ? 'result: the signature math verifies, but the gateway would REJECT this request (see ✘ above)'
        : 'result: signature does NOT verify',
  );
  io.stdout.write(`${out.join('\n')}\n`);
  return result.accepted ? EXIT.ok : EXIT.failed;
}

/** Built with the stdin to read, so tests can feed a capture without touching process.stdin. */
export function createVerify(stdin: () => Readable): Command {
  return async (argv, io) => {
    const opts = parseCommandLine(argv, VERIFY_FLAGS, io, { usage: USAGE, help: HELP });
    if (typeof opts === 'number') return opts;
    const problem = usageProblem(opts);
    if (problem !== undefined) return usageFailure(io, USAGE, problem);
    let loaded: Loaded;
    try {
      loaded = await load(opts, stdin);
    } catch (err) {
      return runtimeFailure(io, (err as Error).message);
    }
    const nowSeconds = opts.now === undefined ? Math.floor(Date.now() / 1000) : Number(opts.now);
    return report(io, loaded, nowSeconds);
  };
}

export const verify: Command = createVerify(() => process.stdin);
