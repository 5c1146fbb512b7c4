// The image's runtime stage without Docker: production dependencies only (npm ci --omit=dev) in a clean
// folder, the compiled dist/, and `node dist/src/main.js serve` answering a signed request via the simulator.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { startSimulator } from '../../src/simulator/index.js';
import { makeVendor, postDeposit, waitFor } from './support/live-sidecar.js';
import { REPO_ROOT } from './support/render.js';

const app = mkdtempSync(join(tmpdir(), 'deploy-image-'));
after(() => rmSync(app, { recursive: true, force: true }));
const pkg = JSON.parse(readFileSync(`${REPO_ROOT}package.json`, 'utf8')) as {
  devDependencies?: Record<string, string>;
};

describe('Dockerfile and .dockerignore', () => {
  const dockerfile = readFileSync(`${REPO_ROOT}Dockerfile`, 'utf8');
  const stages = dockerfile.split(/^FROM /m).slice(1);
  const runtime = stages.at(-1) ?? '';

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

  test('runtime: numeric non-root user, exec-form entrypoint, SIGTERM, no secrets', () => {
    const user = /^USER (\d+)(?::(\d+))?$/m.exec(runtime);
    assert.ok(user && Number(user[1]) > 0, 'USER must be a numeric non-root uid');
    assert.match(runtime, /^ENTRYPOINT \["node", "--max-semi-space-size=8", "dist\/src\/main\.js"\]$/m);
    assert.match(runtime, /^CMD \["serve"\]$/m);
    assert.match(runtime, /^STOPSIGNAL SIGTERM$/m);
    assert.doesNotMatch(dockerfile, /^(ENV|ARG) \S*(PASSWORD|SECRET|TOKEN|PRIVATE_KEY)/im, 'no secrets in layers');
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
  before(() => {
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
  });

  test('has no development dependency', () => {
    for (const name of Object.keys(pkg.devDependencies ?? {})) {
      assert.ok(!existsSync(join(app, 'node_modules', name)), `${name} is a devDependency but was installed`);
    }
  });

  test('loads every runtime module with production dependencies only', () => {
    const entries = ['app.js', 'config/load.js', 'simulator/index.js'].map((f) => `./dist/src/${f}`);
    execFileSync(
      process.execPath,
      ['--input-type=module', '-e', entries.map((e) => `await import(${JSON.stringify(e)});`).join('')],
      {
        cwd: app,
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 30_000,
      },
    );
  });

  test('`node dist/src/main.js serve` answers a signed request, then stops on SIGTERM with exit 0', async (t) => {
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
    // Exactly the image's ENTRYPOINT and CMD, with NODE_ENV as the image sets it.
    const [, ...entrypointArgs] = JSON.parse(
      /^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(`${REPO_ROOT}Dockerfile`, 'utf8'))![1]!,
    ) as string[];
    const child = spawn(process.execPath, [...entrypointArgs, 'serve'], {
      cwd: app,
      env: { ...env, NODE_ENV: 'production' },
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    t.after(() => child.kill('SIGKILL'));
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const urls = await new Promise<{ proxyUrl: string; adminUrl: string }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start log line within 15 s; stderr: ${stderr}`)), 15_000);
      void exited.then((code) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
      createInterface({ input: child.stdout }).on('line', (line) => {
        const entry = parseJson(line);
        if (typeof entry?.proxyUrl === 'string' && typeof entry.adminUrl === 'string') {
          clearTimeout(timer);
          resolve({ proxyUrl: entry.proxyUrl, adminUrl: entry.adminUrl });
        }
      });
    });
    await waitFor(`${urls.adminUrl}/readyz`, 10_000);
    const deposit = await postDeposit(urls.proxyUrl);
    assert.ok(deposit.status >= 200 && deposit.status < 300, `deposit: ${deposit.status} ${deposit.body}`);
    assert.equal(typeof parseJson(deposit.body)?.transaction_link, 'string');
    child.kill('SIGTERM');
    assert.equal(await exited, 0, `exit code after SIGTERM; stderr: ${stderr}`);
  });
});

function parseJson(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
