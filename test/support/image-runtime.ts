import { readFileSync } from 'node:fs';

/** How a child's node runs: its flags (before the program) and the environment they come with. */
export interface Runtime {
  readonly flags: readonly string[];
  readonly env: Readonly<Record<string, string>>;
}

/**
 * What the image runs, read from the Dockerfile's last stage: the node flags of its ENTRYPOINT and the variables
 * of its ENV lines. The bench, the fault campaign and the tests that start the sidecar as the pod does measure
 * those, not a copy of them.
 */
export const IMAGE_RUNTIME: Runtime = imageRuntime(readFileSync(new URL('../../Dockerfile', import.meta.url), 'utf8'));

function imageRuntime(dockerfile: string): Runtime {
  const stage = dockerfile.split(/^FROM /m).at(-1) ?? '';
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(stage)?.[1] ?? '[]') as string[];
  // The node flags only: the ENTRYPOINT may start with a wrapper (prlimit) that has flags of its own.
  const flags = entrypoint.slice(entrypoint.indexOf('node') + 1).filter((arg) => arg.startsWith('--'));
  const env = Object.fromEntries([...stage.matchAll(/^ENV (\w+)=(\S+)$/gm)].map((m) => [m[1] ?? '', m[2] ?? '']));
  if (flags.length === 0) throw new Error('the Dockerfile has no ENTRYPOINT running node with flags');
  return { flags, env };
}
