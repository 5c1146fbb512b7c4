import { publicKeyFingerprint } from '../signing/keys.js';
import { MIN_RSA_BITS } from '../config/private-key.js';
import { generateRsaKeyPair, keyPairPaths, outputProblem, writeKeyPair } from '../tools/key-pair-files.js';
import { parseCommandLine, runtimeFailure, usageFailure } from '../tools/usage.js';
import { EXIT, type Command } from './command.js';

const ALLOWED_BITS = [2048, 3072, 4096] as const;
const DEFAULT_BITS = 3072;
const USAGE = 'usage: signing-sidecar keygen [--bits 2048|3072|4096] [--out DIR] [--name NAME]';
const HELP = `${USAGE}

Generates an RSA key pair for the gateway (spec 5.2: PKCS#1 v1.5, SHA-256, at least ${MIN_RSA_BITS} bits).

  --bits N     key size: 2048, 3072 or 4096 (default ${DEFAULT_BITS}); fewer than ${MIN_RSA_BITS} is refused
  --out DIR    directory to write into (default: the current directory; it must exist)
  --name NAME  file name prefix, e.g. --name staging writes staging-private-key.pem (one pair per environment)

Writes <name->private-key.pem (PKCS#8, mode 0600: give it to the sidecar only) and <name->public-key.pem
(SPKI "PUBLIC KEY": send it to your account manager). Never overwrites an existing file.
Exit codes: 0 written, 1 an output file exists or writing failed, 2 bad usage (including too few bits).
`;

function parseBits(raw: string | undefined): number | string {
  if (raw === undefined) return DEFAULT_BITS;
  if (!/^\d+$/.test(raw)) return `--bits must be a number, not "${raw}"`;
  const bits = Number(raw);
  if (bits < MIN_RSA_BITS) return `--bits ${bits} is refused: the gateway rejects keys under ${MIN_RSA_BITS} bits`;
  if (!(ALLOWED_BITS as readonly number[]).includes(bits)) return `--bits must be one of ${ALLOWED_BITS.join(', ')}`;
  return bits;
}

function nextSteps(publicKeyPath: string, privateKeyPath: string): string {
  return [
    'next steps:',
    `  1. send ${publicKeyPath} to your account manager (it is public; the private key never leaves this host)`,
    '     and compare the fingerprint above with the one they confirm',
    `  2. point the sidecar at the private key: SIDECAR_PRIVATE_KEY_FILE=${privateKeyPath}`,
    '  3. once the key is uploaded, run `npx signing-sidecar check`, then `npx signing-sidecar serve`',
    '',
  ].join('\n');
}

export const keygen: Command = async (argv, io) => {
  const parsed = parseCommandLine(
    argv,
    { bits: { type: 'string' }, out: { type: 'string' }, name: { type: 'string' } },
    io,
    { usage: USAGE, help: HELP },
  );
  if (typeof parsed === 'number') return parsed;
  const bits = parseBits(parsed.bits);
  if (typeof bits === 'string') return usageFailure(io, USAGE, bits);
  if (parsed.name !== undefined && !/^[A-Za-z0-9._-]+$/.test(parsed.name)) {
    return usageFailure(io, USAGE, '--name may contain only letters, digits, ".", "_" and "-"');
  }
  const dir = parsed.out ?? process.cwd();
  const paths = keyPairPaths(dir, parsed.name);
  const problem = await outputProblem(dir, paths);
  if (problem !== undefined) return runtimeFailure(io, problem);

  const { privateKey, publicKey } = await generateRsaKeyPair(bits);
  const privatePem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const publicPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  try {
    await writeKeyPair(paths, privatePem, publicPem);
  } catch (err) {
    return runtimeFailure(
      io,
      `could not write the key pair: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  io.stdout.write(
    [
      `wrote ${paths.privateKey} (RSA ${bits} bits, PKCS#8, mode 0600: keep it secret)`,
      `wrote ${paths.publicKey} (public key to send to the gateway)`,
      `public key fingerprint (SHA-256 of SPKI DER): ${publicKeyFingerprint(publicKey)}`,
      nextSteps(paths.publicKey, paths.privateKey),
    ].join('\n'),
  );
  return EXIT.ok;
};
