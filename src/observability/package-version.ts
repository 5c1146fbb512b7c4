import { readFileSync } from 'node:fs';

/**
 * The package version, found by walking up from this file (src/observability/ under tsx, dist/src/observability/
 * built, dist/image/ bundled).
 */
export function packageVersion(): string {
  for (const up of ['../../package.json', '../../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(up, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'signing-sidecar' && pkg.version) return pkg.version;
    } catch {
      // not at this level; try the next one up
    }
  }
  return 'unknown';
}
