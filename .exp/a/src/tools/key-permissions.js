import { stat } from 'node:fs/promises';
/**
 * Warns (never fails) when the key file is open to group or others: the key still works, but anyone who can
 * read it can sign payments. Kubernetes Secret volumes default to 0644, hence the defaultMode hint.
 */
export async function keyPermissions(path, platform = process.platform) {
    if (platform === 'win32')
        return { mark: '-', detail: 'not checked on Windows (POSIX modes do not apply)' };
    let mode;
    try {
        mode = (await stat(path)).mode & 0o777;
    }
    catch (err) {
        return { mark: '✘', detail: `cannot stat ${path}: ${err.code ?? 'error'}` };
    }
    const octal = mode.toString(8).padStart(4, '0');
    if ((mode & 0o077) !== 0) {
        return { mark: '!', detail: `${path} has mode ${octal}: group/others can access it; run chmod 600 (Kubernetes: defaultMode 0400)` };
    }
    return { mark: '✔', detail: `${path} has mode ${octal} (owner only)` };
}
