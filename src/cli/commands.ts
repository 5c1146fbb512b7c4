import type { Command } from './command.js';
import { serve } from './serve.js';

export interface CommandEntry {
  readonly run: Command;
  readonly summary: string;
}

/** Every subcommand, by name. Loaded eagerly: they are small and share most modules. */
export const COMMANDS: Record<string, CommandEntry> = {
  serve: { run: serve, summary: 'run the signing proxy (configured by SIDECAR_* settings)' },
};
