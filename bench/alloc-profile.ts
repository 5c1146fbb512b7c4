// npm run bench:alloc [-- --seconds 8]: where the sidecar's and the floor's V8 heap allocations come from, on the
// plain unkeyed payment path at 200/s. After a warm-up, each process gets an allocation window (alloc-probe.ts:
// KB per request), then a window under V8's sampling heap profiler (objects freed by either collector included):
// the top allocation sites by bytes, each its share of the sampled total and KB per request. All on 127.0.0.1;
// the children and the key are removed at the end. Machine load moves none of these figures.
import { parseArgs } from 'node:util';
import { openLoop } from './load.js';
import { stopAll, type Child } from './processes.js';
import * as stack from './stack.js';

const { values: flags } = parseArgs({
  options: { seconds: { type: 'string', default: '8' }, top: { type: 'string', default: '10' } },
});
const [SECONDS, TOP, RATE] = [Number(flags.seconds), Number(flags.top), 200];
const say = (text: string): boolean => process.stdout.write(`${text}\n`);

interface Site {
  readonly site: string;
  readonly bytes: number;
}

async function profileOf(name: string, proc: Child): Promise<void> {
  const target = { [name]: stack.sidecarTarget(proc.url) };
  await openLoop(target, RATE, 2, 1); // warm-up: the JIT settles
  const measured = await openLoop(target, RATE, SECONDS, 1, { [name]: proc });
  const kb = measured[name]?.allocKbPerRequest ?? Number.NaN;
  await proc.ask('profile-start 4096');
  await openLoop(target, RATE, SECONDS, 1);
  const profile = (await proc.ask('profile-stop')) as { total: number; sites: Site[] };
  const requests = RATE * SECONDS;
  say(`\n${name} on Node ${process.versions.node}: ${kb.toFixed(2)} KB allocated per request (V8 heap)`);
  say(`sampled: ${(profile.total / requests / 1024).toFixed(2)} KB per request\n`);
  say('| site | KB per request | share |\n| --- | --- | --- |');
  for (const { site, bytes } of profile.sites.slice(0, TOP))
    say(`| \`${site}\` | ${(bytes / requests / 1024).toFixed(2)} | ${((100 * bytes) / profile.total).toFixed(1)} % |`);
}

const ws = stack.workspaceUntilExit();
try {
  const gateway = await stack.startGateway();
  const [sidecar, floor] = [await stack.startSidecar(ws, gateway.url), await stack.startFloor(ws, gateway.url)];
  stack.removeWorkspace(ws);
  await profileOf('sidecar', sidecar);
  await profileOf('floor', floor);
} finally {
  await stopAll();
}
