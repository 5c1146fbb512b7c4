// Secret rotation without a restart: the secret files are read again every SIDECAR_SECRET_POLL_INTERVAL_MS and
// a changed content is validated exactly as at start (secret-files.ts) before it replaces the value in use.
//
// Polling the resolved content rather than fs.watch: Kubernetes updates a mounted Secret by writing a new
// timestamped folder and renaming a `..data` symlink over the old one, so the file the sidecar was given
// (`key.pem -> ..data/key.pem`) is never written, and an inotify watch on it sees nothing (or loses its inode).
// Reading the path every second follows every kind of replacement: the symlink swap, an editor's rename, `cp`.
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../errors.js';
import { contentDigest } from './secret-files.js';

/** The metric label of each watched file (signing_sidecar_config_reloads_total{setting}). */
export type WatchedSetting =
  | 'private_key'
  | 'pkcs11_pin'
  | 'password'
  | 'upstream_ca'
  | 'upstream_proxy_password'
  | 'upstream_proxy_ca'
  | 'postback_keys'
  | 'postback_forward_secret'
  | 'state_mac_keys'
  | 'limits';

export interface WatchedFile {
  readonly name: WatchedSetting;
  /** How logs name it: `ENV_VAR (file.key)`. */
  readonly setting: string;
  readonly file: string;
  /** contentDigest of the content loaded with the configuration; read afresh at start when absent. */
  readonly loadedDigest?: string | undefined;
  /** Validates a content and returns what installs it; throws a ConfigError whose reason never quotes it. */
  load(text: string): () => void;
}

export type ReloadTrigger = 'poll' | 'manual';

export type ReloadReport =
  | { readonly name: WatchedSetting; readonly setting: string; readonly outcome: 'success' }
  | { readonly name: WatchedSetting; readonly setting: string; readonly outcome: 'unchanged' }
  | { readonly name: WatchedSetting; readonly setting: string; readonly outcome: 'error'; readonly reason: string };

export interface SecretWatcherOptions {
  readonly intervalMs: number;
  /** Called for every change applied or refused (and, on a manual reload, for every file left unchanged). */
  readonly report: (report: ReloadReport, trigger: ReloadTrigger) => void;
}

interface FileState {
  /** Content digest (or read error) of the value in use. */
  applied: string;
  /** The refused content last reported: a poll does not report it again. */
  reported: string | undefined;
  /** What the previous poll saw: a refused content is reported once it is the same on two polls in a row. */
  previous: string | undefined;
}

/**
 * Watches the secret files. A valid new content is installed at once (the next request or login uses it). An
 * invalid one (half-written, wrong kind, unreadable) keeps the old value and is reported, once it has stayed the
 * same for one more poll: a file that a tool writes in place is invalid for an instant before it is complete, and
 * that instant is no failure. reloadNow() (SIGHUP) reads every file at once and reports without waiting.
 */
export class SecretWatcher {
  private readonly state = new Map<WatchedSetting, FileState>();
  private timer: NodeJS.Timeout | undefined;
  /** One pass at a time: a slow disk never stacks passes. */
  private running: Promise<ReloadReport[]> = Promise.resolve([]);

  constructor(
    private readonly files: readonly WatchedFile[],
    private readonly options: SecretWatcherOptions,
  ) {}

  get settings(): readonly WatchedSetting[] {
    return this.files.map((file) => file.name);
  }

  /** Records the content in use (as loaded with the configuration) and starts polling. */
  async start(): Promise<void> {
    for (const file of this.files) {
      // The content the sidecar started with, as loaded with its configuration: a file that changed since then
      // is a change, picked up by the first poll.
      const applied = file.loadedDigest ?? (await digestOf(file.file));
      this.state.set(file.name, { applied, reported: undefined, previous: undefined });
    }
    const tick = (): void => {
      void this.pass('poll').finally(() => {
        if (this.timer !== undefined) this.timer = setTimeout(tick, this.options.intervalMs).unref();
      });
    };
    this.timer = setTimeout(tick, this.options.intervalMs).unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Reads every file now (SIGHUP); resolves with what happened to each. */
  reloadNow(): Promise<ReloadReport[]> {
    return this.pass('manual');
  }

  private pass(trigger: ReloadTrigger): Promise<ReloadReport[]> {
    this.running = this.running.then(async () => {
      const reports: ReloadReport[] = [];
      for (const file of this.files) {
        const report = await this.check(file, trigger);
        if (report === undefined) continue;
        reports.push(report);
        this.options.report(report, trigger);
      }
      return reports;
    });
    return this.running;
  }

  private async check(file: WatchedFile, trigger: ReloadTrigger): Promise<ReloadReport | undefined> {
    const state = this.state.get(file.name);
    if (state === undefined) return undefined;
    const { name, setting } = file;
    const read = await readText(file.file);
    const digest = read.ok ? contentDigest(read.text) : `error:${read.code}`;
    const previous = state.previous;
    state.previous = digest;
    if (digest === state.applied) {
      state.reported = undefined;
      return trigger === 'manual' ? { name, setting, outcome: 'unchanged' } : undefined;
    }
    if (trigger === 'poll' && digest === state.reported) return undefined;
    let install: () => void;
    try {
      if (!read.ok) throw new ConfigError(setting, `cannot read file ${file.file}: ${read.code}`);
      install = file.load(read.text);
    } catch (err) {
      if (trigger === 'poll' && previous !== digest) return undefined;
      state.reported = digest;
      // Any other error is reported by type only: its message might quote what it failed to parse.
      const reason = err instanceof ConfigError ? reasonOf(err) : `not valid (${(err as Error).name})`;
      return { name, setting, outcome: 'error', reason };
    }
    install();
    state.applied = digest;
    state.reported = undefined;
    return { name, setting, outcome: 'success' };
  }
}

type ReadResult = { readonly ok: true; readonly text: string } | { readonly ok: false; readonly code: string };

async function readText(path: string): Promise<ReadResult> {
  try {
    return { ok: true, text: await readFile(path, 'utf8') };
  } catch (err) {
    return { ok: false, code: (err as NodeJS.ErrnoException).code ?? 'error' };
  }
}

async function digestOf(path: string): Promise<string> {
  const read = await readText(path);
  return read.ok ? contentDigest(read.text) : `error:${read.code}`;
}

/** The reason of a ConfigError without the setting it starts with (the log line names the setting on its own). */
function reasonOf(err: ConfigError): string {
  const prefix = `${err.setting}: `;
  return err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
}
