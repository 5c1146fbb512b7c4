// Loaded into the sidecar and the floor proxy (`node --import`) so that the bench can ask what their V8 heap
// allocated over a window of load. Commands arrive on stdin, one a line; at its end the probe sends its process
// SIGTERM. Each answer is one JSON line {"probe": ...} on stdout. Idle until asked: nothing runs between commands.
//   alloc-start / alloc-stop: bytes allocated on the V8 heap in between. The heap's used size only grows by
//     allocation between collections, so the bytes are the growth from the start to the first collection, from
//     the end of each collection to the start of the next (v8.GCProfiler reports both sides of every one, minor
//     and major), and from the last to the stop. Buffer contents (outside the V8 heap) are not counted. Also the
//     bytes promoted: what the young-generation collections moved to the old generation (its growth across each),
//     which only a full collection frees.
//   profile-start / profile-stop: V8's sampling heap profiler over the window, objects freed by minor and major
//     collections included, so that it lists what was allocated rather than what is still alive: the top
//     allocation sites by bytes (self), each its function, file and line.
import { createInterface } from 'node:readline';
import { GCProfiler, getHeapStatistics } from 'node:v8';
import type { Session } from 'node:inspector/promises';

const TOP_SITES = 60;
let window: { readonly profiler: GCProfiler; readonly usedAtStart: number } | undefined;
let session: Session | undefined;

const answer = (body: Record<string, unknown>): boolean => process.stdout.write(`${JSON.stringify(body)}\n`);

function allocStart(): void {
  const profiler = new GCProfiler();
  window = { profiler, usedAtStart: getHeapStatistics().used_heap_size };
  profiler.start();
  answer({ probe: 'alloc-start' });
}

function allocStop(): void {
  if (window === undefined) return void answer({ probe: 'alloc-stop', error: 'not started' });
  const usedAtStop = getHeapStatistics().used_heap_size; // before stop(), whose report is itself allocated
  const { statistics } = window.profiler.stop();
  const collections = { minor: 0, major: 0 };
  let [bytes, promoted, usedAfterLast] = [0, 0, window.usedAtStart];
  for (const gc of statistics) {
    bytes += gc.beforeGC.heapStatistics.usedHeapSize - usedAfterLast;
    usedAfterLast = gc.afterGC.heapStatistics.usedHeapSize;
    if (/scavenge|minor/i.test(gc.gcType)) {
      collections.minor++;
      promoted += oldSpaceUsed(gc.afterGC) - oldSpaceUsed(gc.beforeGC);
    } else collections.major++;
  }
  bytes += usedAtStop - usedAfterLast;
  window = undefined;
  answer({ probe: 'alloc-stop', bytes, promoted, ...collections });
}

function oldSpaceUsed(side: {
  heapSpaceStatistics: ReadonlyArray<{ spaceName: string; spaceUsedSize: number }>;
}): number {
  return side.heapSpaceStatistics.find((space) => space.spaceName === 'old_space')?.spaceUsedSize ?? 0;
}

interface ProfileNode {
  readonly callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  readonly selfSize: number;
  readonly children: readonly ProfileNode[];
}

async function profileStart(samplingInterval: number): Promise<void> {
  const { Session } = await import('node:inspector/promises');
  session = new Session();
  session.connect();
  const options = { samplingInterval, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true };
  await session.post('HeapProfiler.startSampling', options);
  answer({ probe: 'profile-start' });
}

async function profileStop(): Promise<void> {
  if (session === undefined) return void answer({ probe: 'profile-stop', error: 'not started' });
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as {
    profile: { head: ProfileNode };
  };
  session.disconnect();
  session = undefined;
  // Sites by their own bytes, summed over every call path that reaches them.
  const bySite = new Map<string, number>();
  let total = 0;
  const walk = (node: ProfileNode): void => {
    const { functionName, url, lineNumber, columnNumber } = node.callFrame;
    const file = url.replace(/^.*\/(node_modules\/)/, '$1').replace(/^.*\/(dist|bench|src)\//, '$1/');
    const site = `${functionName || '(anonymous)'} ${file || '(native)'}:${lineNumber + 1}:${columnNumber + 1}`;
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    total += node.selfSize;
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  const sites = [...bySite].sort((a, b) => b[1] - a[1]).slice(0, TOP_SITES);
  answer({ probe: 'profile-stop', total, sites: sites.map(([site, bytes]) => ({ site, bytes })) });
}

createInterface({ input: process.stdin })
  .on('line', (line) => {
    const [command, argument] = line.trim().split(' ');
    if (command === 'alloc-start') allocStart();
    else if (command === 'alloc-stop') allocStop();
    else if (command === 'profile-start') void profileStart(Number(argument) || 4096);
    else if (command === 'profile-stop') void profileStop();
  })
  // The bench is gone (even killed): the process stops as its orchestrator would stop it.
  .on('close', () => process.kill(process.pid, 'SIGTERM'));
