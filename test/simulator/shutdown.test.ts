// close() with a request parked in a delay fault: it must resolve promptly, answer nothing afterwards and leave no
// timer behind. Run in a child process, because only process exit proves that nothing keeps the event loop alive.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

const SIMULATOR = pathToFileURL(new URL('../../packages/simulator/src/index.ts', import.meta.url).pathname).href;

// Sends a token request that meets an 8 s delay fault, waits (polling, with a deadline) until the fault has
// taken it, closes the simulator and reports. The process must then exit on its own, well before 8 s.
const CHILD = `
import { generateKeyPairSync } from 'node:crypto';
import { request } from 'node:http';
const { startSimulator } = await import(${JSON.stringify(SIMULATOR)});
const { publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const publicKeyPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
const sim = await startSimulator({ accounts: [{ username: 'v@example.com', password: 'pw', publicKeyPem }] });
sim.faults.inject({ kind: 'delay', delayMs: 8000, target: 'token' });
const url = new URL(sim.listenUrl);
const outcome = new Promise((resolve) => {
  const req = request({ host: url.hostname, port: url.port, method: 'POST', path: '/api/v2/auth/token',
    headers: { 'content-type': 'application/json' }, agent: false }, (res) => resolve('answered ' + res.statusCode));
  req.on('error', (err) => resolve('dropped ' + err.message));
  req.end(JSON.stringify({ grant_type: 'password', username: 'v@example.com', password: 'pw' }));
});
const deadline = Date.now() + 5000;
while (sim.faults.pending().length > 0) {
  if (Date.now() > deadline) throw new Error('fault never applied');
  await new Promise((resolve) => setTimeout(resolve, 5));
}
const started = Date.now();
await sim.close();
console.log(JSON.stringify({ closeMs: Date.now() - started, outcome: await outcome }));
`;

describe('shutdown', () => {
  it('close() during a delay fault resolves promptly, drops the request and leaves no timer', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', CHILD], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    // Timed from the child's report (written right after close() resolved), not from its start: starting Node,
    // tsx and an RSA key takes seconds on a loaded machine, and says nothing about a lingering timer.
    let reportedAt: number | undefined;
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
      reportedAt ??= Date.now();
    });
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    clearTimeout(killer);
    const exitMs = Date.now() - (reportedAt ?? Number.NaN);
    assert.equal(code, 0, `child failed: ${stderr}`);
    // The delay fault's 8 s timer, had it survived close(), would hold the process almost that long after the report.
    assert.ok(exitMs < 4000, `child took ${exitMs} ms to exit after close()`);
    const report = JSON.parse(stdout.trim()) as { closeMs: number; outcome: string };
    assert.ok(report.closeMs < 1000, `close took ${report.closeMs} ms`);
    assert.match(report.outcome, /^dropped /, 'no answer after close');
  });
});
