// Who may read the files that sign payments: the private key file, and with SIDECAR_SIGNER=pkcs11 the PIN file (with
// the token, whoever reads the PIN can sign). One rule, judged at config load (a ConfigWarning, logged by `serve` at
// start) and by `check` on its "key file permissions" / "PIN file permissions" lines (tools/key-permissions.ts).
// Warned, never refused: the file still works. Kubernetes Secret volumes default to 0644, hence the defaultMode hint.
import type { ConfigWarning } from './config-warning.js';

/** The part of a file's stat the rule reads (stat follows a symlink, as a Kubernetes Secret volume's files are). */
export interface FileAccess {
  readonly mode: number;
  readonly gid: number;
}

/** How config load stats a file a setting names (load.ts): undefined when it cannot (the read judged the file). */
export type StatSettingFile = (path: string) => FileAccess | undefined;

/** Who besides the owner can reach the file, and its permission bits as `chmod` writes them (`0644`). */
export type FileModeVerdict =
  | { readonly access: 'owner'; readonly octal: string }
  /** Group access for this process's own group only: a Kubernetes Secret mounted 0440 with fsGroup. */
  | { readonly access: 'own-group'; readonly octal: string; readonly gid: number }
  | { readonly access: 'open'; readonly octal: string };

/** POSIX modes say nothing on Windows: no verdict there. */
export const modesApply = (platform: NodeJS.Platform = process.platform): boolean => platform !== 'win32';

export function judgeFileMode(file: FileAccess, processGid: number | undefined = process.getgid?.()): FileModeVerdict {
  const mode = file.mode & 0o777;
  const octal = mode.toString(8).padStart(4, '0');
  if ((mode & 0o007) === 0 && (mode & 0o070) !== 0 && file.gid === processGid) {
    return { access: 'own-group', octal, gid: file.gid };
  }
  return (mode & 0o077) !== 0 ? { access: 'open', octal } : { access: 'owner', octal };
}

/** What an open file's verdict says, after its path: the same words in the start log and in `check`. */
export function openFileReason(octal: string): string {
  return `has mode ${octal}: group/others can access it; run chmod 600 (Kubernetes: defaultMode 0440 with fsGroup set to the sidecar's group)`;
}

/**
 * The config warning for a secret file that group or others can reach, naming its setting; undefined when only its
 * owner (or the process's own group) can, or when it cannot be stat-ed.
 */
export function fileModeWarning(
  setting: string,
  path: string,
  stat: StatSettingFile,
  platform: NodeJS.Platform = process.platform,
): ConfigWarning | undefined {
  if (!modesApply(platform)) return undefined;
  const access = stat(path);
  if (access === undefined) return undefined;
  const verdict = judgeFileMode(access);
  if (verdict.access !== 'open') return undefined;
  return { setting, message: `${path} ${openFileReason(verdict.octal)}`, kind: 'file-mode' };
}
