// The image's runtime stage without Docker: production dependencies only (npm ci --omit=dev) in a clean
// folder, the bundle alone (dist/image, scripts/bundle.ts), and `node dist/image/main.js serve` answering a signed
// request via the simulator.
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { startSimulator } from '@signing-sidecar/simulator';
import { IMAGE_RUNTIME } from '../support/image-runtime.js';
import { makeVendor, postDeposit, waitFor } from './support/live-sidecar.js';
import { REPO_ROOT } from './support/render.js';
import { bundle } from '../../scripts/bundle.js';

const app = mkdtempSync(join(tmpdir(), 'deploy-image-'));
after(() => rmSync(app, { recursive: true, force: true }));
const dockerfile = readFileSync(`${REPO_ROOT}Dockerfile`, 'utf8');
/** The last stage: what the image runs. */
const runtime = dockerfile.split(/^FROM /m).at(-1) ?? '';
/** The image's ENTRYPOINT, `node` replaced by this test's own node (the image's is on its PATH). */
const entrypoint = (JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(runtime)?.[1] ?? '[]') as string[]).map((arg) =>
  arg === 'node' ? process.execPath : arg,
);
/** The environment the runtime stage sets (ENV NAME=value lines). */
const imageEnv = IMAGE_RUNTIME.env;
const pkg = JSON.parse(readFileSync(`${REPO_ROOT}package.json`, 'utf8')) as {
  version: string;
  scripts: Record<string, string>;
  devDependencies?: Record<string, string>;
  engines?: { node?: string };
};

describe('Dockerfile and .dockerignore', () => {
  const stages = dockerfile.split(/^FROM /m).slice(1);

  test('multi-stage: dev dependencies to build, production dependencies only at run time', () => {
    assert.ok(stages.length >= 2);
    assert.match(dockerfile, /npm ci --omit=dev --ignore-scripts/);
    assert.match(dockerfile, /^ARG NODE_IMAGE=node:24-[\w.-]*slim$/m, 'Node 24 LTS, slim');
    assert.doesNotMatch(runtime, /^RUN .*npm (ci|install)/m, 'nothing installed in the runtime stage');
    for (const copy of runtime.match(/^COPY .*$/gm) ?? []) {
      assert.ok(
        /--from=/.test(copy) || /^COPY package\.json \.\/$/.test(copy),
        `runtime copies only built output: ${copy}`,
      );
    }
  });

  test('runtime: numeric non-root user, exec-form entrypoint without core dumps, SIGTERM, no secrets', () => {
    const user = /^USER (\d+)(?::(\d+))?$/m.exec(runtime);
    assert.ok(user && Number(user[1]) > 0, 'USER must be a numeric non-root uid');
    assert.match(
      runtime,
      /^ENTRYPOINT \["prlimit", "--core=1:1", "--", "node", "--expose-gc", "--max-semi-space-size=4", "--max-old-space-size=192", "--no-maglev", "--no-allocation-site-pretenuring", "--preserve-symlinks", "--preserve-symlinks-main", "dist\/image\/main\.js"\]$/m,
    );
    // Node's diagnostic reports hold the environment and the command line: none is written on a crash or signal.
    assert.doesNotMatch(dockerfile, /--report-|NODE_OPTIONS/, 'no diagnostic report on fatal error or signal');
    assert.match(runtime, /^CMD \["serve"\]$/m);
    assert.deepEqual(imageEnv, { NODE_ENV: 'production', MALLOC_ARENA_MAX: '1', MALLOC_TRIM_THRESHOLD_: '131072' });
    assert.match(runtime, /^STOPSIGNAL SIGTERM$/m);
    assert.doesNotMatch(dockerfile, /^(ENV|ARG) \S*(PASSWORD|SECRET|TOKEN|PRIVATE_KEY)/im, 'no secrets in layers');
  });

  test('npm start runs what the image runs: its node flags, its malloc settings, the bundle, serve', () => {
    const [assignments = '', command = ''] = /^((?:\w+=\S+ )*)node (.*)$/.exec(pkg.scripts.start ?? '')?.slice(1) ?? [];
    const startEnv: Record<string, string> = {};
    for (const [, name = '', value = ''] of assignments.matchAll(/(\w+)=(\S+)/g)) startEnv[name] = value;
    const image = entrypoint.slice(entrypoint.indexOf(process.execPath) + 1);
    assert.deepEqual(command.split(' '), [...image, 'serve']);
    const { NODE_ENV: _mode, ...tuning } = imageEnv;
    assert.deepEqual(startEnv, tuning);
  });

  test('the Node.js the image runs is a supported version (engines), and CI runs the product on it', () => {
    const major = /^ARG NODE_IMAGE=node:(\d+)-/m.exec(dockerfile)?.[1];
    assert.ok(major, 'NODE_IMAGE names a Node major');
    const engines = pkg.engines?.node ?? '';
    for (const supported of [major, process.versions.node.split('.')[0]]) {
      assert.match(
        engines,
        new RegExp(`(^|\\|\\|)\\s*\\^${supported}\\.`),
        `engines.node "${engines}" lists Node ${supported}`,
      );
    }
    const ci = readFileSync(`${REPO_ROOT}.ci/run`, 'utf8');
    const install = new RegExp(`npm install .*\\bnode@${major}\\b`).exec(ci);
    assert.ok(install, `.ci/run installs Node ${major}`);
    const onImageNode = ci.slice(install.index);
    assert.match(onImageNode, /^export PATH="\$node\d+_dir\/node_modules\/node\/bin:\$PATH"$/m, 'first on PATH');
    for (const step of ['npm run demo', 'npm run chaos --', 'npm run bench -- --smoke']) {
      assert.ok(onImageNode.includes(`\n${step}`), `.ci/run runs ${step} on Node ${major}`);
    }
    const directories = /^\s*test\/\{([a-z,]+)\}\/\*\.test\.ts$/m.exec(onImageNode)?.[1]?.split(',') ?? [];
    assert.ok(directories.length > 0, `.ci/run runs test directories on Node ${major}`);
    for (const directory of directories) {
      const files = readdirSync(`${REPO_ROOT}test/${directory}`).filter((name) => name.endsWith('.test.ts'));
      assert.ok(files.length > 0, `test/${directory} holds tests`);
    }
  });

  test('.dockerignore keeps dependencies, build output, git, tests and keys out of the context', () => {
    const ignore = readFileSync(`${REPO_ROOT}.dockerignore`, 'utf8')
      .split('\n')
      .map((l) => l.trim());
    for (const entry of ['**/node_modules', 'dist', '.git', 'test', '**/*.pem', '**/*.key']) {
      assert.ok(ignore.includes(entry), `.dockerignore must list ${entry}`);
    }
  });
});

describe('runtime stage reproduced in a clean folder', () => {
  before(async () => {
    copyFileSync(`${REPO_ROOT}package.json`, join(app, 'package.json'));
    copyFileSync(`${REPO_ROOT}package-lock.json`, join(app, 'package-lock.json'));
    execFileSync('npm', ['ci', '--omit=dev', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund'], {
      cwd: app,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 300_000,
    });
    execFileSync(
      process.execPath,
      [`${REPO_ROOT}node_modules/typescript/bin/tsc`, '-p', 'tsconfig.build.json', '--outDir', join(app, 'dist')],
      {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 300_000,
      },
    );
    // As the build stage does; the runtime stage copies dist/image alone.
    await bundle('main.js', join(app, 'dist', 'src'), join(app, 'dist', 'image'));
    rmSync(join(app, 'dist', 'src'), { recursive: true });
  });

  test('has no development dependency', () => {
    for (const name of Object.keys(pkg.devDependencies ?? {})) {
      assert.ok(!existsSync(join(app, 'node_modules', name)), `${name} is a devDependency but was installed`);
    }
  });

  test('carries no simulator: neither its package, its code, nor the certificate library only it uses', () => {
    for (const absent of ['node_modules/@signing-sidecar/simulator', 'node_modules/selfsigned']) {
      assert.ok(!existsSync(join(app, absent)), `${absent} is in the image`);
    }
    assert.ok(existsSync(join(app, 'dist/image/main.js')), 'the sidecar itself is');
    for (const file of bundleFiles()) {
      assert.doesNotMatch(readFileSync(join(app, 'dist/image', file), 'utf8'), /selfsigned|simulator\/src/, file);
    }
  });

  test('loads every file of the bundle, on demand ones included, with production dependencies only', () => {
    const chunks = bundleFiles().filter((file) => file !== 'main.js');
    assert.ok(chunks.some((file) => file.startsWith('redis-store-')) && chunks.some((f) => f.startsWith('otel-')));
    const program = chunks.map((file) => `await import(${JSON.stringify(`./dist/image/${file}`)});`).join('');
    execFileSync(process.execPath, ['--input-type=module', '-e', program], {
      cwd: app,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 30_000,
    });
  });

  test('every file of the bundle is ASCII (V8 then holds its source one byte a character) and one makes require', () => {
    const withRequire = bundleFiles().filter((file) => {
      const text = readFileSync(join(app, 'dist/image', file), 'utf8');
      assert.doesNotMatch(text, /[\u0080-\uffff]/, `${file} holds a non-ASCII character`);
      return text.includes('bundleRequire(import.meta.url)');
    });
    assert.equal(withRequire.length, 1, `createRequire in ${withRequire.join(', ')}`);
  });

  test('the operator tools run from the bundle, and it knows its version', () => {
    const run = (...args: string[]): string =>
      execFileSync(process.execPath, ['dist/image/main.js', ...args], { cwd: app, encoding: 'utf8', timeout: 30_000 });
    assert.equal(run('--version').trim(), pkg.version);
    assert.match(run('check', '--help'), /^usage: signing-sidecar check$/m);
  });

  test('`node dist/image/main.js serve` answers a signed request, writes no file, then stops on SIGTERM with exit 0', async (t) => {
    const placeholder = await makeVendor('http://127.0.0.1:1');
    const simulator = await startSimulator({
      accounts: [
        { username: placeholder.username, password: placeholder.password, publicKeyPem: placeholder.publicKeyPem },
      ],
    });
    t.after(async () => {
      await simulator.close();
      rmSync(placeholder.dir, { recursive: true, force: true });
    });
    const env = {
      ...placeholder.env,
      SIDECAR_BASE_URL: simulator.baseUrl,
      SIDECAR_LOG_LEVEL: 'info',
      PATH: process.env.PATH ?? '',
    };
    // Exactly the image's ENTRYPOINT, CMD and ENV. Under strace, every file system call of the process and its
    // threads is recorded: "writes nothing" (the read-only root filesystem, and no writable volume in the pod) is
    // checked, not assumed. Started with the core limit as high as this host allows, as a runtime may leave it.
    const trace = join(app, 'serve.strace');
    const child = spawn(
      'prlimit',
      [`--core=${hardCoreLimit()}`, '--', 'strace', '-f', '-qq', '-e', 'trace=%file', '-o', trace, '--'].concat(
        entrypoint,
        'serve',
      ),
      { cwd: app, env: { ...env, ...imageEnv } },
    );
    const spawned = new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code === 'ENOENT'
            ? new Error('strace not found: `apt-get install -y strace` (.ci/run installs it)')
            : err,
        ),
      );
    });
    await spawned;
    // strace exits with its command's exit status.
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    t.after(() => child.kill('SIGKILL'));
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const urls = await new Promise<{ proxyUrl: string; adminUrl: string }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start log line within 30 s; stderr: ${stderr}`)), 30_000);
      void exited.then((code) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
      createInterface({ input: child.stdout }).on('line', (line) => {
        const entry = parseJson(line);
        if (typeof entry?.proxyUrl === 'string' && typeof entry.adminUrl === 'string') {
          clearTimeout(timer);
          resolve({ proxyUrl: entry.proxyUrl, adminUrl: entry.adminUrl });
        }
      });
    });
    await waitFor(`${urls.adminUrl}/healthz/token`, 10_000);
    assert.equal((await fetch(`${urls.adminUrl}/readyz`)).status, 200);
    const deposit = await postDeposit(urls.proxyUrl);
    assert.ok(deposit.status >= 200 && deposit.status < 300, `deposit: ${deposit.status} ${deposit.body}`);
    assert.equal(typeof parseJson(deposit.body)?.transaction_link, 'string');
    await fetch(`${urls.adminUrl}/metrics`).then((res) => res.arrayBuffer());
    const node = Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/)[0]);
    assert.ok(node > 0, 'the node process under strace');
    // Killing strace would leave its tracee running: should an assertion below fail, node is killed itself.
    t.after(() => {
      if (existsSync(`/proc/${node}`)) process.kill(node, 'SIGKILL');
    });
    assert.match(
      readFileSync(`/proc/${node}/cmdline`, 'utf8'),
      /dist\/image\/main\.js\0serve\0$/,
      'prlimit exec-ed node',
    );
    assert.match(readFileSync(`/proc/${node}/limits`, 'utf8'), /^Max core file size +1 +1 +bytes/m, 'RLIMIT_CORE 1');
    process.kill(node, 'SIGTERM');
    assert.equal(await exited, 0, `exit code after SIGTERM; stderr: ${stderr}`);
    const calls = readFileSync(trace, 'utf8').split('\n');
    assert.ok(
      calls.some((line) => /\bopenat\(.*dist\/image\/main\.js"/.test(line)),
      'the trace covers the process',
    );
    assert.deepEqual(calls.filter(writesFile), [], 'serve wrote to the filesystem');
  });

  /** Starts `argv serve` in `app`; resolves with the child and its start log line once it serves. */
  async function serving(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<Serving> {
    const child = spawn(argv[0] ?? '', [...argv.slice(1), 'serve'], { cwd: app, env });
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once('exit', (_code, signal) => resolve(signal)),
    );
    try {
      const started = await new Promise<Record<string, unknown>>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no start log line within 30 s')), 30_000);
        createInterface({ input: child.stdout }).on('line', (line) => {
          const entry = parseJson(line);
          if (typeof entry?.proxyUrl !== 'string') return;
          clearTimeout(timer);
          resolve(entry);
        });
      });
      return { child, started, exited };
    } catch (err) {
      child.kill('SIGKILL');
      throw err;
    }
  }

  /** Starts `argv` in `app` with the core limit as high as allowed, aborts it once it serves; the files it left. */
  async function crash(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<string[]> {
    const before = new Set(readdirSync(app));
    const { child, exited } = await serving(['prlimit', `--core=${hardCoreLimit()}`, '--', ...argv], env);
    try {
      // SIGABRT: what a V8 fatal error or a native crash ends in; node leaves it to the kernel's default (a dump).
      child.kill('SIGABRT');
      assert.equal(await exited, 'SIGABRT');
    } finally {
      child.kill('SIGKILL');
    }
    return readdirSync(app).filter((name) => !before.has(name));
  }

  test('killed by SIGABRT while holding the password: no file, where plain node leaves one that holds it', async (t) => {
    // Only where the kernel writes cores into the working directory can the test see one; a core_pattern that
    // pipes to the host's handler (systemd-coredump, apport) would hand it the control run's core.
    const pattern = readFileSync('/proc/sys/kernel/core_pattern', 'utf8').trim();
    if (pattern.startsWith('|') || pattern.includes('/') || hardCoreLimit() === '1' || hardCoreLimit() === '0') {
      t.skip(`cores are not written to the working directory here (core_pattern "${pattern}")`);
      return;
    }
    const vendor = await makeVendor('http://127.0.0.1:1');
    t.after(() => rmSync(vendor.dir, { recursive: true, force: true }));
    const env = { ...vendor.env, SIDECAR_LOG_LEVEL: 'info', PATH: process.env.PATH ?? '', ...imageEnv };
    const node = entrypoint.indexOf(process.execPath);
    const plain = await crash(entrypoint.slice(node), env);
    try {
      assert.equal(plain.length, 1, 'without the limit, this host writes a core file');
      const core = readFileSync(join(app, plain[0] ?? ''));
      assert.ok(core.includes(vendor.password), 'and it holds the password');
    } finally {
      for (const name of plain) rmSync(join(app, name), { force: true });
    }
    assert.deepEqual(await crash(entrypoint, env), [], 'the image command left a file');
  });

  test('at rest the image command has given start-up garbage back: the young generation at its first size, less RSS', async (t) => {
    const imageMajor = /^ARG NODE_IMAGE=node:(\d+)-/m.exec(dockerfile)?.[1];
    if (process.versions.node.split('.')[0] !== imageMajor) {
      // Node 20's V8 takes the memory-reducing collection for a regular one, which keeps the young generation's pages.
      t.skip(`the image runs Node ${imageMajor}, this is Node ${process.versions.node}`);
      return;
    }
    const vendor = await makeVendor('http://127.0.0.1:1');
    t.after(() => rmSync(vendor.dir, { recursive: true, force: true }));
    const env = { ...vendor.env, SIDECAR_LOG_LEVEL: 'info', PATH: process.env.PATH ?? '', ...imageEnv };
    const atRest = async (argv: readonly string[]): Promise<{ youngBytes: number; residentBytes: number }> => {
      const { child, started, exited } = await serving(argv, env);
      try {
        const metrics = await (await fetch(`${String(started.adminUrl)}/metrics`)).text();
        const gauge = (series: string): number =>
          Number(new RegExp(`^signing_sidecar_${series} (\\d+)$`, 'm').exec(metrics)?.[1] ?? Number.NaN);
        return {
          youngBytes: gauge('nodejs_heap_space_size_total_bytes\\{space="new"\\}'),
          residentBytes: gauge('process_resident_memory_bytes'),
        };
      } finally {
        child.kill('SIGTERM');
        await exited;
      }
    };
    const image = await atRest(entrypoint);
    const withoutGc = await atRest(entrypoint.filter((arg) => arg !== '--expose-gc'));
    assert.ok(image.youngBytes <= withoutGc.youngBytes / 2, `young generation ${JSON.stringify({ image, withoutGc })}`);
    assert.ok(
      image.residentBytes < withoutGc.residentBytes - 2 * 2 ** 20,
      `RSS ${JSON.stringify({ image, withoutGc })}`,
    );
  });
});

/** The files of the bundle, chunks included. */
function bundleFiles(): string[] {
  return readdirSync(join(app, 'dist/image')).filter((file) => file.endsWith('.js'));
}

/** The hard RLIMIT_CORE of this process, as prlimit takes it: the highest soft limit a child may set. */
function hardCoreLimit(): string {
  const line = /^Max core file size +(\S+) +(\S+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
  return line?.[2] ?? '0';
}

/** File system calls that create, change or remove a file, outside the kernel's own /dev, /proc and /sys. */
function writesFile(straceLine: string): boolean {
  const path = /"([^"]*)"/.exec(straceLine)?.[1] ?? '';
  if (/^\/(dev|proc|sys)\//.test(path)) return false;
  const call = /^\d+\s+(\w+)\(/.exec(straceLine)?.[1] ?? '';
  if (/^(open|openat|openat2)$/.test(call)) return /\bO_(WRONLY|RDWR|CREAT|TRUNC|APPEND)\b/.test(straceLine);
  return /^(creat|mkdir|mkdirat|rmdir|unlink|unlinkat|rename|renameat2?|link|linkat|symlink|symlinkat|truncate|chmod|fchmodat|chown|lchown|fchownat|utimes?|utimensat|futimesat|mknod|mknodat)$/.test(
    call,
  );
}

interface Serving {
  readonly child: ChildProcess;
  /** The start log line. */
  readonly started: Record<string, unknown>;
  /** Resolves with the signal that ended the child (null: it exited). */
  readonly exited: Promise<NodeJS.Signals | null>;
}

function parseJson(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
