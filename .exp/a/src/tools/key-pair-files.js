import { generateKeyPair } from 'node:crypto';
import { access, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
const generateKeyPairAsync = promisify(generateKeyPair);
/** `private-key.pem` / `public-key.pem`, or `<name>-private-key.pem` when a name (e.g. "staging") is given. */
export function keyPairPaths(dir, name) {
    const prefix = name === undefined || name === '' ? '' : `${name}-`;
    return { privateKey: join(dir, `${prefix}private-key.pem`), publicKey: join(dir, `${prefix}public-key.pem`) };
}
async function exists(path) {
    try {
        await access(path);
        return true;
    }
    catch {
        return false;
    }
}
/** Why the pair cannot be written there, before spending seconds on key generation; undefined when free. */
export async function outputProblem(dir, paths) {
    try {
        if (!(await stat(dir)).isDirectory())
            return `${dir} is not a directory`;
    }
    catch {
        return `directory ${dir} does not exist`;
    }
    for (const path of [paths.privateKey, paths.publicKey]) {
        if (await exists(path))
            return `${path} already exists; keygen never overwrites a key (move it away or use --name)`;
    }
    return undefined;
}
/** RSA key generation on the thread pool: a 4096-bit key can take seconds and must not freeze the process. */
export async function generateRsaKeyPair(bits) {
    return generateKeyPairAsync('rsa', { modulusLength: bits, publicExponent: 0x10001 });
}
/**
 * Writes both files with flag "wx" (fail if present), so a key that appeared since outputProblem() is still
 * never overwritten. The private key is created 0600 from the start, never chmod-ed after being readable.
 * If the public file cannot be created, the private file made a moment ago is removed: no half-made pair.
 */
export async function writeKeyPair(paths, privatePem, publicPem) {
    await writeFile(paths.privateKey, privatePem, { flag: 'wx', mode: 0o600 });
    try {
        await writeFile(paths.publicKey, publicPem, { flag: 'wx', mode: 0o644 });
    }
    catch (err) {
        await unlink(paths.privateKey);
        throw err;
    }
}
