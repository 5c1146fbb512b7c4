// Writes docs/openapi.json: the egress listener's contract for the schema's default settings, generated from the
// code's declarations (src/observability/openapi.ts). `npm run docs:openapi` writes it; test/contract/openapi.test.ts
// fails when the committed file differs, and when a signed route of the defaults has no description.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defaultOpenApiInputs, openApiDocument } from '../src/observability/openapi.js';
import { packageVersion } from '../src/version.js';

export const OPENAPI_FILE = fileURLToPath(new URL('../docs/openapi.json', import.meta.url));

export function renderOpenApi(): string {
  return `${JSON.stringify(openApiDocument(defaultOpenApiInputs(packageVersion()), true), null, 2)}\n`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(OPENAPI_FILE, renderOpenApi());
  console.log(`wrote ${OPENAPI_FILE}`);
}
