import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { collectConfig } from '../../src/config/load.js';
import { CALLER_ENV_VARS, editDistance, KNOWN_ENV_VARS } from '../../src/config/unknown-names.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { productionEnv } from './support.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('config: a misspelled setting is refused, naming the closest one', () => {
  let keys: TestKeys;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    keys = await makeKeys();
    env = productionEnv(keys.privateKeyFile);
  });

  const refusals = async (more: NodeJS.ProcessEnv): Promise<string[]> => {
    const result = await collectConfig({ ...env, ...more });
    return result.ok ? [] : result.errors.map((err) => err.message);
  };

  it('SIDECAR_IDEMPOTENCY_REQUIERD=true: refused, naming SIDECAR_IDEMPOTENCY_REQUIRED', async () => {
    assert.deepEqual(await refusals({ SIDECAR_IDEMPOTENCY_REQUIERD: 'true' }), [
      'SIDECAR_IDEMPOTENCY_REQUIERD: is not a setting; did you mean SIDECAR_IDEMPOTENCY_REQUIRED?',
    ]);
  });

  it('a setting in lower case, one letter off, or far from any: each refused on its own line', async () => {
    assert.deepEqual(
      await refusals({ sidecar_log_level: 'debug', SIDECAR_ADMN_PORT: '9464', SIDECAR_COLOUR: 'blue' }),
      [
        'sidecar_log_level: is not a setting; did you mean SIDECAR_LOG_LEVEL?',
        'SIDECAR_ADMN_PORT: is not a setting; did you mean SIDECAR_ADMIN_PORT?',
        'SIDECAR_COLOUR: is not a setting; the settings are in docs/configuration.md',
      ],
    );
  });

  it('every other refusal is still reported with it', async () => {
    const messages = await refusals({ SIDECAR_LISTEN_PORTT: '8080', SIDECAR_BASE_URL: undefined });
    assert.deepEqual(messages.toSorted(), [
      'SIDECAR_BASE_URL (baseUrl): is required',
      'SIDECAR_LISTEN_PORTT: is not a setting; did you mean SIDECAR_LISTEN_PORT?',
    ]);
  });

  it("Kubernetes' variables for a Service named sidecar or sidecar-* are not settings, and not refused", async () => {
    assert.deepEqual(
      await refusals({
        SIDECAR_SERVICE_HOST: '10.0.0.7',
        SIDECAR_SERVICE_PORT: '8081',
        SIDECAR_SERVICE_PORT_POSTBACKS: '8081',
        SIDECAR_PORT: 'tcp://10.0.0.7:8081',
        SIDECAR_PORT_8081_TCP: 'tcp://10.0.0.7:8081',
        SIDECAR_PORT_8081_TCP_PROTO: 'tcp',
        SIDECAR_PORT_8081_TCP_PORT: '8081',
        SIDECAR_PORT_8081_TCP_ADDR: '10.0.0.7',
        SIDECAR_METRICS_PORT: 'tcp://10.0.0.8:9464',
      }),
      [],
    );
  });

  it("the callers' SIDECAR_URL is not a setting, and not refused (one envFrom for both containers)", async () => {
    assert.deepEqual(await refusals({ SIDECAR_URL: 'http://127.0.0.1:8080' }), []);
    assert.deepEqual(await refusals({ SIDECAR_URLS: 'http://127.0.0.1:8080' }), [
      'SIDECAR_URLS: is not a setting; the settings are in docs/configuration.md',
    ]);
  });

  it('a config-file key that no setting declares: refused, naming the closest key', async () => {
    const file = join(keys.dir, 'misspelled.yaml');
    await writeFile(file, 'idempotency:\n  requierd: true\nlogLevl: debug\n');
    assert.deepEqual(await refusals({ SIDECAR_CONFIG_FILE: file }), [
      "config: configuration param 'idempotency.requierd' not declared in the schema; did you mean 'idempotency.required'?",
      "config: configuration param 'logLevl' not declared in the schema; did you mean 'logLevel'?",
    ]);
  });

  it('edit distance: insertions, deletions, substitutions; a transposition counts two', () => {
    assert.equal(editDistance('', 'abc'), 3);
    assert.equal(editDistance('kitten', 'sitting'), 3);
    assert.equal(editDistance('REQUIRED', 'REQUIERD'), 2);
    assert.equal(editDistance('same', 'same'), 0);
  });
});

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

describe("config: every SIDECAR_* variable the project sets or tells operators to set is a setting (or the callers' SIDECAR_URL)", () => {
  it('in the manifests, the Dockerfile, the README, docs/, scripts/, the bench and the test support', () => {
    const files = [
      ...['deploy', 'docs', 'scripts', 'bench', 'test/support'].flatMap((dir) => filesUnder(join(ROOT, dir))),
      join(ROOT, 'Dockerfile'),
      join(ROOT, 'README.md'),
    ].filter((file) => !/\.(png|svg|jpg)$/.test(file));
    const unknown: string[] = [];
    for (const file of files) {
      // Whole names only: SIDECAR_REDIS_* (a family) and ERR_SIDECAR_SHUTDOWN (an error code) are not variables.
      // In code, only an object key or a quoted name is a variable (SIDECAR_PROGRAM is a constant's name).
      const name = /(?<![\w])SIDECAR_[A-Z0-9_]*[A-Z0-9](?![\w*])/.source;
      const pattern = file.endsWith('.ts')
        ? new RegExp(`(?<=['"\`])${name}|${name}(?=['"]?:)`, 'g')
        : new RegExp(name, 'g');
      for (const [found] of readFileSync(file, 'utf8').matchAll(pattern)) {
        if (!KNOWN_ENV_VARS.has(found) && !CALLER_ENV_VARS.has(found))
          unknown.push(`${relative(ROOT, file)}: ${found}`);
      }
    }
    assert.deepEqual(unknown, []);
  });
});
