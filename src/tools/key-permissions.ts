import { stat } from 'node:fs/promises';
import type { CheckMark } from './check-report.js';

/**
 * Warns (never fails) when the key file is open to group or others: the key still works, but anyone who can
 * read it can sign payments. Kubernetes Secret volumes default to 0644, hence the defaultMode hint.
 */
export async function keyPermissions(
  path: string,
  platform: NodeJS.Platform = process.platform,
): Promise<{ mark: CheckMark; detail: string }> {
  if (platform === 'win32') return { mark: '-', detail: 'not checked on Windows (POSIX modes do not apply)' };
  let mode: number;
  let gid: number;
  try {
    const info = await stat(path);
    mode = info.mode & 0o777;
    gid = info.gid;
  } catch (err) {
    return { mark: '✘', detail: `cannot stat ${path}: ${(err as NodeJS.ErrnoException).code ?? 'error'}` };
  }
  const octal = mode.toString(8).padStart(4, '0');
  if ((mode & 0o007) === 0 && (mode & 0o070) !== 0 && gid === process.getgid?.()) {
    // Kubernetes Secret volumes with fsGroup: root-owned, group = this process's own group, mode 0440.
    return {
      mark: '✔',
      detail: `${path} has mode ${octal}, readable only by its owner and this process's own group ${gid} (Kubernetes fsGroup)`,
    };
  }
  if ((mode & 0o077) !== 0) {
    return {
      mark: '!',
      detail: `${path} has mode ${octal}: group/others can access it; run chmod 600 (Kubernetes: defaultMode 0440 with fsGroup set to the sidecar's group)`,
    };
  }
  return { mark: '✔', detail: `${path} has mode ${octal} (owner only)` };
}
