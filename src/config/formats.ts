// The value formats of the settings (schema.ts registers them with convict by name, so that convict coerces an env
// var's text with them and its validate() checks them). load.ts calls the same validate functions setting by
// setting, so that each refusal names the one setting it is about. Refusals are reported as
// `ENV_VAR (file.key): <message>`, so the messages do not repeat the name.

/** A format's check: throws an Error whose message is the refusal's reason. */
export type Validate = (value: unknown) => void;

interface Format {
  readonly validate: Validate;
  /** Turns an env var's text (or a text in the config file) into the value that validate judges. */
  readonly coerce?: (text: string) => unknown;
}

const BOOLEAN_TEXT: Readonly<Record<string, boolean>> = { true: true, false: false, '1': true, '0': false };

const isInteger = (value: unknown): value is number => typeof value === 'number' && Number.isInteger(value);

/** Every format a setting may name. */
export const FORMATS = {
  text: {
    validate: (value) => {
      if (typeof value !== 'string') throw new Error('must be of type String');
    },
  },
  /**
   * A file's path. One written in the config file resolves against the file's folder (like the simulator's
   * --config), so a config folder works from any working directory; one from an env var stays relative to the
   * working directory. Surrounding whitespace is dropped (setting-values.ts does both for every such setting).
   */
  'file-path': {
    validate: (value) => {
      if (typeof value !== 'string') throw new Error('must be of type String');
    },
  },
  /**
   * Comma-separated in the environment, a list in the config file; each item trimmed and empty ones dropped
   * (setting-values.ts), so `a, b,` is `a` and `b`.
   */
  'text-list': {
    validate: (value) => {
      if (!Array.isArray(value)) throw new Error('must be of type Array');
    },
    coerce: (text) => text.split(','),
  },
  'positive-int': {
    validate: (value) => {
      if (!isInteger(value) || value <= 0) throw new Error('must be a positive integer');
    },
    coerce: Number.parseFloat,
  },
  'whole-number': {
    validate: (value) => {
      if (!isInteger(value) || value < 0) throw new Error('must be a whole number >= 0');
    },
    coerce: Number.parseFloat,
  },
  /** `auto`, or how many: a count whose default depends on something known only later (the Redis topology). */
  'auto-or-whole-number': {
    validate: (value) => {
      if (value !== 'auto' && (!isInteger(value) || value < 0)) throw new Error('must be auto or a whole number >= 0');
    },
    coerce: (text) => (text.trim().toLowerCase() === 'auto' ? 'auto' : Number.parseFloat(text)),
  },
  /** `auto`, or how many: a size whose default is derived at start (the memory store's budget from the heap). */
  'auto-or-positive-int': {
    validate: (value) => {
      if (value !== 'auto' && (!isInteger(value) || value <= 0)) throw new Error('must be auto or a positive integer');
    },
    coerce: (text) => (text.trim().toLowerCase() === 'auto' ? 'auto' : Number.parseFloat(text)),
  },
  'tcp-port': {
    validate: (value) => {
      if (!isInteger(value) || value < 0 || value > 65_535) throw new Error('ports must be within range 0 - 65535');
    },
    coerce: (text) => Number.parseInt(text, 10),
  },
  /**
   * Every boolean setting uses this format, never convict's Boolean: convict reads any text but "false" as true, so
   * SIDECAR_QUIT_ENDPOINT=0, =no, =off or = (empty) turned the endpoint on. Text is true or false (any case), 1 or
   * 0; anything else is left as text, which the validation then refuses.
   */
  'strict-boolean': {
    validate: (value) => {
      if (typeof value !== 'boolean') throw new Error('must be true or false (or 1 or 0)');
    },
    coerce: (text) => BOOLEAN_TEXT[text.toLowerCase()] ?? text,
  },
} as const satisfies Record<string, Format>;

export type FormatName = keyof typeof FORMATS;

/** What a setting's `format` may be: one of the formats above, or the list of the values it may take. */
export type SettingFormat = FormatName | string[];

/** The check of a setting's format, as convict's validate() runs it. */
export function validatorOf(format: SettingFormat): Validate {
  if (!Array.isArray(format)) return FORMATS[format].validate;
  return (value) => {
    if (typeof value !== 'string' || !format.includes(value)) {
      throw new Error(`must be one of the possible values: ${JSON.stringify(format)}`);
    }
  };
}
