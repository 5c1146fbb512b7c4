// A throwaway redis-server for `npm run bench -- --state-store redis`: loopback, no persistence, a free port (Redis
// cannot listen on port 0 and report it), stopped with the bench's other children.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { freePort } from '../test/support/free-port.js';
import { adopt, type Child } from './processes.js';

/** Resolves once redis-server says it accepts connections; `url` is its redis:// address. */
export async function startRedis(timeoutMs = 10_000): Promise<Child> {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const url = `redis://127.0.0.1:${port}`;
  return new Promise((resolve, reject) => {
    const fail = (why: string): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`redis-server: ${why} (install the Debian package redis-server)`));
    };
    const timer = setTimeout(() => fail(`not ready within ${timeoutMs} ms`), timeoutMs);
    child.once('error', (err) => fail(err.message));
    child.once('exit', (code) => fail(`exited early (${code})`));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (!line.includes('Ready to accept connections')) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      resolve(adopt(child, url));
    });
  });
}
