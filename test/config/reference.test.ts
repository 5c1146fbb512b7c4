// docs/configuration.md is generated from the schema: a setting added, renamed or re-documented in
// src/config/schema.ts without `npm run docs:config` fails here, so the reference never drifts from the code.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { REFERENCE_FILE, renderConfigurationReference } from '../../scripts/config-reference.js';
import { CONFIG_FILE_ENV, EVERY_SETTING } from '../../src/config/schema.js';

describe('docs/configuration.md', () => {
  const committed = readFileSync(REFERENCE_FILE, 'utf8');

  it('is what `npm run docs:config` generates from the schema (run it and commit the result)', () => {
    assert.equal(committed, renderConfigurationReference());
  });

  it('names every setting: its env var, file key and doc text', () => {
    const reference = renderConfigurationReference();
    for (const { env, key, doc } of [...EVERY_SETTING, { ...CONFIG_FILE_ENV, key: '' }]) {
      assert.ok(reference.includes(`| \`${env}\` | ${key === '' ? '' : `\`${key}\``} |`), `${env} (${key})`);
      assert.ok(reference.includes(doc), `${env}: its doc text`);
    }
  });
});
