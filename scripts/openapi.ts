// Writes docs/openapi.json, the egress listener's contract for the schema's default settings, generated from the
// code's declarations (src/contract/), and the typed caller's types generated from it by openapi-typescript
// (examples/typescript/sidecar.d.ts). `npm run docs:openapi` writes both; test/contract/openapi.test.ts fails when the
// committed document differs (or a signed route of the defaults has no description), and
// test/contract/typed-client.test.ts when the committed types do.
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { defaultOpenApiInputs, openApiDocument } from '../src/contract/openapi.js';
import { packageVersion } from '../src/observability/package-version.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
export const OPENAPI_FILE = fileURLToPath(new URL('../docs/openapi.json', import.meta.url));
export const TYPED_CLIENT_FILE = fileURLToPath(new URL('../examples/typescript/sidecar.d.ts', import.meta.url));

export function renderOpenApi(): string {
  return `${JSON.stringify(openApiDocument(defaultOpenApiInputs(packageVersion()), true), null, 2)}\n`;
}

/** Runs openapi-typescript's own command on docs/openapi.json, as examples/README.md has it, writing `output`. */
export async function generateTypes(output: string): Promise<void> {
  const cli = fileURLToPath(new URL('../node_modules/openapi-typescript/bin/cli.js', import.meta.url));
  await promisify(execFile)(process.execPath, [cli, OPENAPI_FILE, '--output', output], { cwd: ROOT, timeout: 60_000 });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(OPENAPI_FILE, renderOpenApi());
  console.log(`wrote ${OPENAPI_FILE}`);
  await generateTypes(TYPED_CLIENT_FILE);
  console.log(`wrote ${TYPED_CLIENT_FILE}`);
}
