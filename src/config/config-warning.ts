/** A setting that is allowed but risky: logged at warn level when the sidecar starts, printed by `check`. */
export interface ConfigWarning {
  /** `ENV_VAR (file.key)`, as in ConfigError. */
  readonly setting: string;
  readonly message: string;
  /**
   * `file-mode`: a secret file that group or others can read (file-mode.ts); `check` shows it on its own "key file
   * permissions" or "PIN file permissions" line rather than as a config line.
   */
  readonly kind?: 'file-mode';
}
