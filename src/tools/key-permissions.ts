import { stat } from 'node:fs/promises';
import { judgeFileMode, modesApply, openFileReason, type FileModeVerdict } from '../config/file-mode.js';
import type { CheckMark } from './check-report.js';

/**
 * `check`'s line for the key file, or the PKCS#11 PIN file: the rule config load warns by (config/file-mode.ts), with
 * a ✔ line when it passes. Warns (never fails) when the file is open to group or others.
 */
export async function keyPermissions(
  path: string,
  platform: NodeJS.Platform = process.platform,
): Promise<{ mark: CheckMark; detail: string }> {
  if (!modesApply(platform)) return { mark: '-', detail: 'not checked on Windows (POSIX modes do not apply)' };
  let verdict: FileModeVerdict;
  try {
    verdict = judgeFileMode(await stat(path));
  } catch (err) {
    return { mark: '✘', detail: `cannot stat ${path}: ${(err as NodeJS.ErrnoException).code ?? 'error'}` };
  }
  switch (verdict.access) {
    case 'own-group':
      // Kubernetes Secret volumes with fsGroup: root-owned, group = this process's own group, mode 0440.
      return {
        mark: '✔',
        detail: `${path} has mode ${verdict.octal}, readable only by its owner and this process's own group ${verdict.gid} (Kubernetes fsGroup)`,
      };
    case 'open':
      return { mark: '!', detail: `${path} ${openFileReason(verdict.octal)}` };
    case 'owner':
      return { mark: '✔', detail: `${path} has mode ${verdict.octal} (owner only)` };
  }
}
