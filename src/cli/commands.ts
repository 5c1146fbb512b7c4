import type { Command } from './command.js';

export interface CommandEntry {
  /** Loaded on demand: `serve` should not carry the operator tools' code in its memory. */
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
    load: async () => (await import('./keygen.js')).keygen,
    summary: 'make an RSA key pair and print the public key fingerprint',
  },
  check: {
    load: async () => (await import('./check.js')).check,
    summary: 'check config, key, TLS, login and clock skew against the gateway',
  },
  sign: {
    load: async () => (await import('./sign.js')).sign,
    summary: 'print the signing string and headers for one request',
  },
  verify: {
    load: async () => (await import('./verify.js')).verify,
    summary: 'explain whether a captured request or postback signature verifies',
  },
  postbacks: {
    load: async () => (await import('./postbacks.js')).postbacks,
    summary: 'list, show, replay or drop queued postbacks and dead letters',
  },
  // An option rather than a command, but main looks every first argument up here.
  '--version': {
    load: async () => (await import('./version.js')).version,
    summary: 'print the package version',
  },
};
