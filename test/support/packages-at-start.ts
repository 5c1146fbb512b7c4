// Run as a child process (a fresh module graph): starts the sidecar from the SIDECAR_* (and OTEL_*) environment,
// prints as JSON which of the optional packages and which OpenTelemetry packages its start loaded, and exits.
import { createRequire } from 'node:module';
import { Writable } from 'node:stream';
import { startSidecar } from '../../src/app.js';
import { loadConfig } from '../../src/config/load.js';

/** Packages only some configurations need; their files land in the CommonJS module cache once loaded. */
export const OPTIONAL_PACKAGES = ['@redis/client', 'yaml'] as const;

const discard = new Writable({ write: (_chunk, _encoding, done) => done() });
await startSidecar(loadConfig(process.env), { logDestination: discard });
const loaded = Object.keys(createRequire(import.meta.url).cache);
const packages = OPTIONAL_PACKAGES.filter((name) => loaded.some((file) => file.includes(`/node_modules/${name}/`)));
// Every OpenTelemetry package by name: the API comes with prom-client; the SDK and the exporter only with tracing.
const otel = [...new Set(loaded.flatMap((file) => /\/node_modules\/(@opentelemetry\/[^/]+)\//.exec(file)?.[1] ?? []))];
process.stdout.write(`${JSON.stringify({ packages, otel: otel.sort() })}\n`);
process.exit(0);
