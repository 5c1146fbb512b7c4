// Every link a reader follows resolves: relative links and #anchors in README.md, CHANGELOG.md and docs/, and the
// `docs/x.md#anchor` references in alerts, settings' docs and error messages (deploy/, src/).
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const FENCE = /^\s*(```|~~~)/;

/** Lines outside fenced code blocks, with their numbers. */
function proseLines(file: string): Array<[number, string]> {
  let fenced = false;
  const lines: Array<[number, string]> = [];
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      if (FENCE.test(line)) fenced = !fenced;
      else if (!fenced) lines.push([i + 1, line]);
    });
  return lines;
}

/** GitHub's heading anchors: lowercase, punctuation dropped, spaces to dashes, a repeated one numbered -1, -2... */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, line] of proseLines(file)) {
    const heading = /^#{1,6}\s+(.+?)\s*#*\s*$/.exec(line)?.[1];
    if (heading !== undefined) {
      const slug = heading
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .trim()
        .replace(/ /g, '-');
      const n = seen.get(slug) ?? 0;
      seen.set(slug, n + 1);
      anchors.add(n === 0 ? slug : `${slug}-${n}`);
    }
    for (const named of line.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) anchors.add(named[1] ?? '');
  }
  return anchors;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

const docs = ['README.md', 'CHANGELOG.md', ...readdirSync(join(ROOT, 'docs')).map((name) => `docs/${name}`)]
  .filter((name) => name.endsWith('.md'))
  .map((name) => join(ROOT, name));

describe('documentation links', () => {
  it('every relative link in README.md, CHANGELOG.md and docs/ reaches a file and, with #, a heading', () => {
    const broken: string[] = [];
    for (const file of docs) {
      for (const [n, line] of proseLines(file)) {
        for (const link of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
          const url = link[1] ?? '';
          if (/^[a-z]+:/i.test(url)) continue;
          const [path = '', anchor] = url.split('#');
          const target = path === '' ? file : resolve(dirname(file), path);
          const where = `${relative(ROOT, file)}:${n} ${url}`;
          if (!existsSync(target)) broken.push(`${where}: no such file`);
          else if (anchor !== undefined && target.endsWith('.md') && !anchorsOf(target).has(anchor)) {
            broken.push(`${where}: no such heading`);
          }
        }
      }
    }
    assert.deepEqual(broken, []);
  });

  it('every docs/x.md#anchor named by the alerts, the settings and the code exists', () => {
    const broken: string[] = [];
    for (const file of [...filesUnder(join(ROOT, 'deploy')), ...filesUnder(join(ROOT, 'src'))]) {
      for (const ref of readFileSync(file, 'utf8').matchAll(/\b([a-z-]+\.md)#([a-z0-9-]+)/g)) {
        const target = [join(ROOT, 'docs', ref[1] ?? ''), join(ROOT, ref[1] ?? '')].find((path) => existsSync(path));
        if (target === undefined || !anchorsOf(target).has(ref[2] ?? '')) {
          broken.push(`${relative(ROOT, file)}: ${ref[0]}`);
        }
      }
    }
    assert.deepEqual(broken, []);
  });
});

describe("the README's requirements", () => {
  // A package the tests need but the README does not name fails on a reader's machine; one the README names but
  // nothing installs leaves CI's fresh machine without it.
  it('name exactly the Debian packages that npm test installs', () => {
    const script = readFileSync(join(ROOT, 'scripts/test-prerequisites.sh'), 'utf8');
    const installed = new Set([...script.matchAll(/\[[\w-]+\]=([\w-]+)/g)].map((m) => m[1]));
    installed.delete('kubectl');
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/\s+/g, ' ');
    const named = /these Debian packages: ([^.]+)\./.exec(readme)?.[1]?.split(', ');
    assert.deepEqual(new Set(named), installed);
    assert.match(readme, /needs `kubectl`/);
  });
});
