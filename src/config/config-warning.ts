/** A setting that is allowed but risky: logged at warn level when the sidecar starts, printed by `check`. */
export interface ConfigWarning {
  /** `ENV_VAR (file.key)`, as in ConfigError. */
  readonly setting: string;
  readonly message: string;
}
