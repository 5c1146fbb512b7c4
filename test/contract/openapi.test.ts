// docs/openapi.json is the local API's contract, generated from the code (src/contract/): a route, a payload, an
// error code, a header or the postback webhook changed without `npm run docs:openapi` fails here, and so does a
// document that a maintained OpenAPI linter (Redocly's, its recommended-strict rules, which also check every example
// against its schema) finds fault with.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { OPENAPI_FILE, renderOpenApi } from '../../scripts/openapi.js';
import { answerChecker } from '../support/openapi-answers.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { errorCatalogue } from '../../src/contract/error-catalogue.js';
import { defaultOpenApiInputs, openApiDocument } from '../../src/contract/openapi.js';

async function lintProblems(text: string) {
  const config = await createConfig({
    extends: ['recommended-strict'],
    // components.responses.unrouted-*: the answers to requests outside every operation (another path, another
    // method, a foreign Host), which OpenAPI has no place to hang from; the document's description points to them.
    rules: { 'no-unused-components': 'off' },
  });
  const problems = await lintFromString({ source: text, absoluteRef: OPENAPI_FILE, config });
  return problems.map((p) => `${p.ruleId} ${p.message} at ${p.location.map((l) => l.pointer).join(', ')}`);
}

describe('docs/openapi.json', () => {
  const committed = readFileSync(OPENAPI_FILE, 'utf8');

  it('is what `npm run docs:openapi` generates from the code (run it and commit the result)', () => {
    assert.equal(committed, renderOpenApi());
  });

  it("passes Redocly's recommended-strict lint: no error, no warning", async () => {
    assert.deepEqual(await lintProblems(committed), []);
  });

  it('describes every code of the error catalogue with its status and retryable flag', () => {
    const document = JSON.parse(committed) as { components: { schemas: Record<string, Schema> } };
    const catalogue = errorCatalogue();
    assert.ok(catalogue.length >= 20, `catalogue of ${catalogue.length}`);
    for (const entry of catalogue) {
      const schema = document.components.schemas[entry.code];
      assert.ok(schema, `${entry.code} is in components.schemas`);
      assert.deepEqual(schema.properties.code, { const: entry.code });
      assert.deepEqual(schema.properties.retryable, { const: entry.retryable });
      for (const status of entry.statuses) assert.match(schema.description, new RegExp(`\\b${status}\\b`), entry.code);
    }
    const outcomeUnknown = catalogue.find((entry) => entry.code === 'sidecar.upstream.outcome_unknown');
    assert.deepEqual(outcomeUnknown?.statuses, [502, 504]);
    assert.equal(outcomeUnknown?.retryable, false);
  });

  it("describes the deposit payload's fields (spec 2.3) and leaves the withdrawal's open", () => {
    const document = JSON.parse(committed) as { components: { schemas: Record<string, object> } };
    const ajv = new Ajv2020({ strict: false });
    const deposit = ajv.compile(document.components.schemas.DepositPayload!);
    const withdrawal = ajv.compile(document.components.schemas.WithdrawalPayload!);
    const payment = { amount: '100.50', currency: 'USD', gateway: 'card', user_id: 'u-42', invoice_no: 'INV-1' };
    assert.ok(deposit({ ...payment, note: 'further fields pass' }));
    assert.ok(!deposit({ ...payment, amount: 100.5 }), 'amount is a string');
    assert.ok(!deposit({ ...payment, amount: '1e3' }), 'amount is a decimal');
    for (const field of ['currency', 'gateway', 'user_id', 'invoice_no'])
      assert.ok(!deposit({ ...payment, [field]: 7 }), `${field} is a string`);
    assert.ok(withdrawal({ anything: ['at', 'all'] }));
  });

  it('refuses to describe a shipped signed route that has no description', () => {
    const inputs = { ...defaultOpenApiInputs('0'), signedRoutes: ['/api/v2/transaction/init', '/api/v2/new/init'] };
    assert.throws(() => openApiDocument(inputs, true), /\/api\/v2\/new\/init has no description/);
    // Served for a configured route, it gets a generic one, and the document still lints clean.
    const served = openApiDocument(inputs);
    assert.match(JSON.stringify(served), /Signed POST \/api\/v2\/new\/init/);
  });

  it('lints clean for a configured route it has no description of', async () => {
    const inputs = { ...defaultOpenApiInputs('0'), signedRoutes: ['/api/v3/payout/init'] };
    assert.deepEqual(await lintProblems(JSON.stringify(openApiDocument(inputs))), []);
  });
});

interface Schema {
  readonly description: string;
  readonly properties: Record<string, unknown>;
}

describe('the answer checker the live tests use (test/support/openapi-answers.ts) refuses what the document does not allow', () => {
  const check = answerChecker(JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as Record<string, unknown>);
  const json = { 'content-type': 'application/json', 'x-request-id': 'r-1' };
  const answer = (status: number, body: unknown, headers: Record<string, string> = json, path = DEPOSIT) => ({
    method: 'POST',
    path,
    status,
    headers,
    body: Buffer.from(JSON.stringify(body)),
  });
  const refusal = { code: 'sidecar.body.invalid_json', message: 'body is not valid JSON', retryable: true };

  it('accepts a refusal as the document has it', () => {
    assert.deepEqual(check(answer(400, refusal)), []);
  });

  it('refuses a wrong retryable flag, a code under another status, an extra field, a missing X-Request-Id', () => {
    assert.notDeepEqual(check(answer(400, { ...refusal, retryable: false })), []);
    assert.notDeepEqual(check(answer(409, refusal)), []);
    assert.notDeepEqual(check(answer(400, { ...refusal, detail: 'x' })), []);
    assert.notDeepEqual(check(answer(400, refusal, { 'content-type': 'application/json' })), []);
    assert.notDeepEqual(check(answer(404, refusal, json, '/elsewhere')), []);
  });

  it("accepts the gateway's own body under any status, but not one that claims a sidecar code", () => {
    assert.deepEqual(check(answer(400, { code: 'signature.verify.failed', message: 'no' })), []);
    assert.deepEqual(check(answer(418, ['anything'])), []);
    assert.notDeepEqual(check(answer(418, { code: 'sidecar.made.up', message: 'x', retryable: true })), []);
  });
});

const DEPOSIT = '/api/v2/transaction/init';
