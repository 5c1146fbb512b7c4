// `signing-sidecar --version`, run as a user runs it: through the process entry, not the command function alone.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const ROOT = new URL('../../', import.meta.url).pathname;
const MAIN = `${ROOT}src/main.ts`;

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

async function cli(args: string[]): Promise<Run> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', MAIN, ...args], {
      cwd: ROOT,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('signing-sidecar --version', () => {
  it('prints the version of package.json alone on one line and exits 0', async () => {
    const pkg = JSON.parse(await readFile(`${ROOT}package.json`, 'utf8')) as {
      version: string;
    };
    const run = await cli(['--version']);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, `${pkg.version}\n`);
    assert.equal(run.stderr, '');
  });

  it('is listed in the top-level help; an extra argument is a usage error (exit 2)', async () => {
    assert.match((await cli(['--help'])).stdout, /^ {2}--version +print the package version$/m);
    const extra = await cli(['--version', 'now']);
    assert.equal(extra.code, 2);
    assert.match(extra.stderr, /usage: signing-sidecar --version/);
  });
});
