import type { Writable } from 'node:stream';

/** ✔ passed, ✘ failed (exit 1), ! warning (exit 0), - not checked or informational. */
export type CheckMark = '✔' | '✘' | '!' | '-';

/** Writes one line per check as soon as it is known, and remembers whether any failed. */
export class CheckReport {
  #failed = false;

  constructor(private readonly out: Writable) {}

  line(mark: CheckMark, name: string, detail: string): void {
    if (mark === '✘') this.#failed = true;
    this.out.write(`${mark} ${name}: ${detail}\n`);
  }

  get failed(): boolean {
    return this.#failed;
  }
}
