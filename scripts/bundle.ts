// `npm run bundle`: what the image runs. tsc's output (dist/src) and the production dependencies it imports,
// bundled by esbuild into dist/image: main.js, and chunks beside it for what is loaded on demand (the operator
// tools, Redis, tracing, PKCS#11, the postback inbox), each loaded only when a command or a setting asks for it.
// Why (docs/performance.md#the-image-runs-a-bundle): loaded as some 300 files, the sidecar's start-up resolves
// enough paths to wake V8's optimizing compiler, whose code then stays resident, and holds every file's module
// records; the bundled `serve` starts from 15 modules and holds about 10 MB less at rest.
// Left out, found in node_modules at run time: pkcs11js (a native addon) and yaml (required on demand, for a YAML
// config file only).
// `--floor`: the bench's floor proxy too, bundled alike (dist/bench-image), so that the bench compares like with
// like.
import { build, type OutputFile } from 'esbuild';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Bundles the program `entry` (a file under `from`) into `to`, every output at its top level: package-version.ts finds
 * package.json two levels up from any of them.
 */
export async function bundle(entry: string, from: string, to: string): Promise<void> {
  rmSync(to, { recursive: true, force: true }); // chunk names change with their content: no stale one stays
  const { outputFiles } = await build({
    entryPoints: [`${from}/${entry}`],
    outdir: to,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: ['pkcs11js', 'yaml'],
    // Not minified: a logged bug's stack (handler.bug) keeps the source's names and lines. Not keepNames either:
    // its one call per function and class at start-up wakes the optimizing compiler (7 MB of RSS at rest). esbuild
    // renames a top-level name only when two modules share it.
    legalComments: 'eof',
    charset: 'ascii', // esbuild's default, said: asciiComments relies on it
    logLevel: 'warning',
    write: false,
  });
  for (const file of outputFiles) {
    mkdirSync(dirname(file.path), { recursive: true });
    if (!file.path.endsWith('.js')) {
      writeFileSync(file.path, file.contents);
      continue;
    }
    const text = asciiComments(withRequireWhereUsed(file));
    // A program (main.js, with its #! line) is executable, as esbuild itself writes it.
    writeFileSync(file.path, text, { mode: text.startsWith('#!') ? 0o755 : 0o644 });
  }
}

/**
 * The CommonJS dependencies (prom-client, pino, undici...) call require(), which an ES module does not have: the
 * outputs that name it get one, made by createRequire (under a name of its own: the sidecar's modules import
 * createRequire too). esbuild's banner would put it in every output, but one chunk calls it (the one with esbuild's
 * __require helper), and each createRequire at start-up is path work, which, summed over the modules `serve` starts
 * from, is what wakes V8's optimizing compiler (docs/performance.md, "The image runs a bundle").
 */
const REQUIRE =
  "import { createRequire as bundleRequire } from 'node:module'; const require = bundleRequire(import.meta.url);";

/**
 * esbuild escapes every non-ASCII character of the code (charset ascii), but keeps comments as written, and some of
 * undici's hold a few (a right quote, a section sign). One is enough for V8 to hold the whole source of its chunk,
 * 1.1 MB, as a two-byte string, for the life of the process: 1 MB more RSS. So any non-ASCII character left is in a
 * comment, where its escape means nothing.
 */
function asciiComments(text: string): string {
  return text.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function withRequireWhereUsed(file: OutputFile): string {
  const text = file.text;
  // A free `require`: not a property (.require), a key (require:) or part of a longer name or text ("--require").
  if (!/(?<![\w$.'"-])require(?![\w$'":-])/.test(text)) return text;
  const shebang = /^#!.*\n/.exec(text)?.[0] ?? '';
  return `${shebang}${REQUIRE}\n${text.slice(shebang.length)}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await bundle('main.js', `${ROOT}dist/src`, `${ROOT}dist/image`);
  if (process.argv.includes('--floor')) await bundle('floor-proxy.js', `${ROOT}dist/bench`, `${ROOT}dist/bench-image`);
}
