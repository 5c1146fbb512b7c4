import type { Command } from '../tools/command.js';

export interface CommandEntry {
  /**
   * Loaded on demand: `serve` should not carry the operator tools' code in its memory. The tools come as one
   * module: in the image's bundle (scripts/bundle.ts) a lazy import each would split the code they share with
   * `serve` into a chunk per combination, and `serve` would start from more modules (docs/performance.md).
   */
  readonly load: () => Promise<Command>;
  readonly summary: string;
}

/** Every subcommand, by name. */
export const COMMANDS: Record<string, CommandEntry> = {
  serve: {
    load: async () => (await import('./serve.js')).serve,
    summary: 'run the sidecar (configured by SIDECAR_* settings)',
  },
  keygen: {
    load: async () => (await import('./tools.js')).keygen,
    summary: 'make an RSA key pair and print the public key fingerprint',
  },
  check: {
    load: async () => (await import('./tools.js')).check,
    summary: 'check config, key, TLS, login and clock skew against the gateway',
  },
  sign: {
    load: async () => (await import('./tools.js')).sign,
    summary: 'print the signing string and headers for one request',
  },
  verify: {
    load: async () => (await import('./tools.js')).verify,
    summary: 'explain whether a captured request or postback signature verifies',
  },
  postbacks: {
    load: async () => (await import('./tools.js')).postbacks,
    summary: 'list, show, replay or drop queued postbacks and dead letters',
  },
  limits: {
    load: async () => (await import('./tools.js')).limits,
    summary: "show each money limit's use and what is left of it",
  },
  // An option rather than a command, but main looks every first argument up here.
  '--version': {
    load: async () => (await import('./tools.js')).version,
    summary: 'print the package version',
  },
};
