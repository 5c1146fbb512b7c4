// npm run bench:instructions: the instructions the sidecar's event loop executes per signed request, counted by
// callgrind (valgrind). CPU time on a shared host moves by 10-20% from minute to minute; an instruction count for
// the same build and the same requests stays within about 3%, so it shows a change of several percent on the main
// thread that timed runs cannot. It is a count, not a time: it does not see cache misses, the kernel or how fast
// each instruction is (a regular expression run costs more instructions than its time suggests), so it complements
// the timed `npm run bench`, it does not replace it. Loopback only, bounded, and every process and file is
// removed.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { SIGNED_ROUTE } from './gateway.js';
import { PAYLOAD, REQUEST_HEADERS } from './payload.js';
import { fmt, machine, renderTable, type Row } from './report.js';
import { createWorkspace, startFloorProxy, startGateway, startSidecar, type RunningProcess } from './stack.js';
import { Teardown } from './teardown.js';

const USAGE = `Usage: npm run bench:instructions -- [options]

  --json           last line of output is one JSON object with the counts
  --smoke          a short run, for CI (about 45 s)
  --requests N     requests counted (default 2000; smoke 200)
  --warmup N       requests before counting starts, so V8 has optimised the hot path (default 4000; smoke 300)
  --connections N  concurrent client connections (default 16)
  --no-floor       skip the floor proxy

Needs valgrind (Debian: apt-get install valgrind). BENCH_SIDECAR_ENTRY points at another build's main.js.
`;

// Starting node under valgrind takes tens of seconds where it takes a fraction of one natively; a request takes
// milliseconds there, so a minute without an answer means the process is stuck, not slow.
const START_TIMEOUT_MS = 180_000;
const REQUEST_TIMEOUT_MS = 60_000;
const CONTROL_TIMEOUT_MS = 60_000;
// A thread that computed signatures has OpenSSL's RSA private-key operation in its profile; no other thread does.
const SIGNING_FUNCTION = /\brsa_ossl_private_encrypt\b/;

interface Counts {
  readonly mainThread: number;
  readonly helperThreads: number;
}

interface Options {
  readonly json: boolean;
  readonly requests: number;
  readonly warmup: number;
  readonly connections: number;
  readonly floor: boolean;
}

function parse(argv: readonly string[]): Options | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      json: { type: 'boolean', default: false },
      smoke: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
      requests: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      'no-floor': { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const integer = (raw: string | undefined, full: number, smoke: number): number => {
    if (raw === undefined) return values.smoke ? smoke : full;
    const n = Number(raw);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`not a positive integer: ${raw}`);
    return n;
  };
  return {
    json: values.json,
    requests: integer(values.requests, 2_000, 200),
    warmup: integer(values.warmup, 4_000, 300),
    connections: integer(values.connections, 16, 16),
    floor: !values['no-floor'],
  };
}

/** valgrind with callgrind counting nothing until told to (callgrind_control -i on), one output file per thread. */
function launcher(outDir: string): string[] {
  return [
    'valgrind',
    '--tool=callgrind',
    '--instr-atstart=no',
    '--separate-threads=yes',
    // V8 writes and rewrites machine code in anonymous memory: valgrind must notice the changes.
    '--smc-check=all-non-file',
    `--callgrind-out-file=${join(outDir, 'callgrind.out.%p')}`,
    `--log-file=${join(outDir, 'valgrind.log')}`,
  ];
}

/** `total` POSTs of the bench payload over `connections` keep-alive connections; any non-2xx answer fails the run. */
async function drive(url: string, total: number, connections: number): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const target = new URL(`${url}${SIGNED_ROUTE}`);
  const one = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const req = request(
        { agent, host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers: { ...REQUEST_HEADERS, 'content-length': Buffer.byteLength(PAYLOAD) } },
        (res) => {
          res.resume();
          res.once('end', () => ((res.statusCode ?? 0) < 300 ? resolve() : reject(new Error(`answer ${res.statusCode}`))));
        },
      );
      req.setTimeout(REQUEST_TIMEOUT_MS, () => req.destroy(new Error(`no answer in ${REQUEST_TIMEOUT_MS} ms`)));
      req.once('error', reject);
      req.end(PAYLOAD);
    });
  let left = total;
  try {
    await Promise.all(
      Array.from({ length: connections }, async () => {
        while (left-- > 0) await one();
      }),
    );
  } finally {
    agent.destroy();
  }
}

/** Sums callgrind's per-thread totals from the dump taken with `callgrind_control -d` (part 1 of each thread). */
function readCounts(outDir: string, pid: number, requests: number): Counts {
  const counts = { mainThread: 0, helperThreads: 0 };
  let signingThreads = 0;
  const dumps = readdirSync(outDir).filter((name) => name.startsWith(`callgrind.out.${pid}.1-`));
  if (dumps.length === 0) throw new Error(`callgrind wrote no dump for pid ${pid}: see ${join(outDir, 'valgrind.log')}`);
  for (const name of dumps) {
    const text = readFileSync(join(outDir, name), 'utf8');
    const thread = Number(/^thread: (\d+)$/m.exec(text)?.[1]);
    // "totals" rather than "summary": after callgrind_control -z, the summary line wraps below zero.
    const perRequest = Number(/^totals: (\d+)$/m.exec(text)?.[1] ?? 0) / requests;
    if (thread === 1) counts.mainThread += perRequest;
    // The signing threads are left out: valgrind's virtual CPU has no AVX-512, so OpenSSL's RSA runs another,
    // slower code path there than on the real machine, and its count says nothing about the sidecar.
    else if (SIGNING_FUNCTION.test(text)) signingThreads++;
    else counts.helperThreads += perRequest;
  }
  // Without OpenSSL's symbols (a node linked to a stripped libcrypto) the signing threads would pass for helpers
  // and swamp their count: better no number than a wrong one.
  if (signingThreads === 0) throw new Error(`no thread shows ${SIGNING_FUNCTION.source}: is node built without OpenSSL's symbols?`);
  return counts;
}

/** callgrind_control for one process, bounded in time, with its own output in the error when it fails. */
function control(pid: number, ...args: string[]): void {
  try {
    execFileSync('callgrind_control', [...args, String(pid)], { stdio: 'pipe', timeout: CONTROL_TIMEOUT_MS });
  } catch (err) {
    const output = (err as { stderr?: Buffer; stdout?: Buffer }).stderr?.toString() || (err as { stdout?: Buffer }).stdout?.toString() || String(err);
    throw new Error(`callgrind_control ${args.join(' ')} ${pid} failed: ${output.trim()}`);
  }
}

const teardown = new Teardown();

async function count(start: (launch: { launcher: string[]; startTimeoutMs: number }) => Promise<RunningProcess>, opts: Options): Promise<Counts> {
  const outDir = teardown.keepDir(mkdtempSync(join(tmpdir(), 'sidecar-callgrind-')));
  let proc: RunningProcess | undefined;
  try {
    proc = await teardown.track(start({ launcher: launcher(outDir), startTimeoutMs: START_TIMEOUT_MS }));
    const { pid } = proc;
    await drive(proc.url, opts.warmup, opts.connections);
    control(pid, '--instr=on');
    // Code first run under instrumentation is translated again; these requests absorb that, then the counts reset.
    await drive(proc.url, Math.min(200, opts.warmup), opts.connections);
    control(pid, '--zero');
    await drive(proc.url, opts.requests, opts.connections);
    control(pid, '--instr=off');
    control(pid, '--dump');
    return readCounts(outDir, pid, opts.requests);
  } finally {
    if (proc) await teardown.stop(proc);
    teardown.removeDir(outDir);
  }
}

const k = (n: number): string => `${fmt(n / 1000, 1)}k`;

async function main(): Promise<number> {
  const opts = parse(process.argv.slice(2));
  if (opts === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  try {
    execFileSync('valgrind', ['--version'], { stdio: 'ignore' });
  } catch {
    process.stderr.write('valgrind is not installed (Debian: apt-get install valgrind)\n');
    return 1;
  }
  teardown.onSignals();
  try {
    const ws = teardown.keepWorkspace(await createWorkspace());
    const gateway = await teardown.track(startGateway());
    const shippedFlags = ['--max-semi-space-size=8'];
    const sidecar = await count((launch) => startSidecar(ws, { gatewayUrl: gateway.url, logLevel: 'info', nodeFlags: shippedFlags, ...launch }), opts);
    const floor = opts.floor ? await count((launch) => startFloorProxy(ws, gateway.url, shippedFlags, launch), opts) : undefined;
    const rows: Row[] = [
      ['machine', machine()],
      ['requests counted (after warm-up)', `${opts.requests} (after ${opts.warmup}), ${opts.connections} connections`],
      ['sidecar main thread (event loop)', `${k(sidecar.mainThread)} instructions per request`],
      ['sidecar V8 helper threads (GC, compiler)', `${k(sidecar.helperThreads)} instructions per request`],
      ...(floor
        ? ([
            ['floor proxy main thread', `${k(floor.mainThread)} instructions per request`],
            ['floor proxy V8 helper threads (GC, compiler)', `${k(floor.helperThreads)} instructions per request`],
          ] as Row[])
        : []),
    ];
    process.stdout.write(`${renderTable(rows)}\n`);
    if (opts.json) {
      const round = (n: number): number => Math.round(n);
      process.stdout.write(
        `${JSON.stringify({
          main_thread_instructions_per_request: round(sidecar.mainThread),
          helper_threads_instructions_per_request: round(sidecar.helperThreads),
          floor_main_thread_instructions_per_request: floor ? round(floor.mainThread) : null,
          floor_helper_threads_instructions_per_request: floor ? round(floor.helperThreads) : null,
        })}\n`,
      );
    }
    return 0;
  } finally {
    await teardown.cleanup();
  }
}

process.exitCode = await main().catch((err: unknown) => {
  process.stderr.write(`bench:instructions failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  return 1;
});
