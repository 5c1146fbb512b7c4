import { ConfigError } from '../errors.js';
import { publicKeyFingerprint, publicKeyPem } from '../signing/keys.js';
import { generateTokenKey } from '../tools/pkcs11-keygen.js';
import { pkcs11SettingsFromEnv } from '../tools/pkcs11-settings.js';
import { MIN_RSA_BITS } from '../config/private-key.js';
import { generateRsaKeyPair, keyPairPaths, outputProblem, writeKeyPair } from '../tools/key-pair-files.js';
import { parseCommandLine, runtimeFailure, usageFailure } from '../tools/usage.js';
import { EXIT, type Command, type CommandIo, type ExitCode } from '../tools/command.js';

const ALLOWED_BITS = [2048, 3072, 4096] as const;
const DEFAULT_BITS = 3072;
const USAGE =
  'usage: signing-sidecar keygen [--bits 2048|3072|4096] [--out DIR] [--name NAME]\n       signing-sidecar keygen --pkcs11 [--bits 2048|3072|4096]';
const HELP = `${USAGE}

Generates an RSA key pair for the gateway (spec 5.2: PKCS#1 v1.5, SHA-256, at least ${MIN_RSA_BITS} bits).

  --bits N     key size: 2048, 3072 or 4096 (default ${DEFAULT_BITS}); fewer than ${MIN_RSA_BITS} is refused
  --out DIR    directory to write into (default: the current directory; it must exist)
  --name NAME  file name prefix, e.g. --name staging writes staging-private-key.pem (one pair per environment)

  --pkcs11     generate the pair inside the PKCS#11 token instead (an HSM or cloud KMS), with the same
               SIDECAR_PKCS11_MODULE, _TOKEN_LABEL or _SLOT, _KEY_LABEL and/or _KEY_ID, and _PIN_FILE as \`serve\`:
               the private key is sensitive, not extractable and may only sign; no file is written. Prints the
               public key PEM and its fingerprint. A key with the same label or ID is never replaced.

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

async function keygenInToken(io: CommandIo, bits: number): Promise<ExitCode> {
  const settings = pkcs11SettingsFromEnv(io.env);
  if ('errors' in settings) {
    for (const err of settings.errors) io.stderr.write(`error: ${err.message}\n`);
    return EXIT.usage;
  }
  let key;
  try {
    key = await generateTokenKey(settings.config, bits);
  } catch (err) {
    if (err instanceof ConfigError) return runtimeFailure(io, err.message);
    throw err;
  }
  io.stdout.write(
    [
      `generated in token "${key.tokenLabel}": RSA ${bits} bits, label "${key.label}", ID ${key.id} (sensitive, not extractable, sign only)`,
      `public key fingerprint (SHA-256 of SPKI DER): ${publicKeyFingerprint(key.publicKey)}`,
      'public key (send it to your account manager):',
      publicKeyPem(key.publicKey).trimEnd(),
      'next steps:',
      '  1. send the public key above to your account manager and compare the fingerprint they confirm',
      `  2. set SIDECAR_SIGNER=pkcs11 and SIDECAR_PKCS11_KEY_ID=${key.id}, then run \`npx signing-sidecar check\``,
      '',
    ].join('\n'),
  );
  return EXIT.ok;
}

export const keygen: Command = async (argv, io) => {
  const parsed = parseCommandLine(
    argv,
    { bits: { type: 'string' }, out: { type: 'string' }, name: { type: 'string' }, pkcs11: { type: 'boolean' } },
    io,
    { usage: USAGE, help: HELP },
  );
  if (typeof parsed === 'number') return parsed;
  const bits = parseBits(parsed.bits);
  if (typeof bits === 'string') return usageFailure(io, USAGE, bits);
  if (parsed.pkcs11 === true) {
    if (parsed.out !== undefined || parsed.name !== undefined) {
      return usageFailure(io, USAGE, '--out and --name write key files; with --pkcs11 the key stays in the token');
    }
    return keygenInToken(io, bits);
  }
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
