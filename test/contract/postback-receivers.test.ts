// The example postback receivers (examples/python/postback_receiver.py, examples/go/postback_receiver.go), each run
// as its own program: the simulator's real signed postback, verified by the sidecar's receiver and delivered signed
// by Standard Webhooks, is stored once with its status; the same postback again is answered 2xx and not stored
// twice; a forged one (another secret, an old timestamp, an altered body, no signature) is refused 401, unstored.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { Webhook } from 'standardwebhooks';
import { forwardSecretFile, newForwardSecret } from '../postback/support.js';
import { freeStablePort } from '../support/free-port.js';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { scratchDir } from '../support/scratch.js';
import { deposit, postJson } from '../support/sim-world.js';
import { sidecarEnv, startTestSidecar, waitUntilReady } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const EXAMPLES = fileURLToPath(new URL('../../examples/', import.meta.url));
const debian = (tool: string): string => (existsSync(`/usr/bin/${tool}`) ? `/usr/bin/${tool}` : tool);

const RECEIVERS: Readonly<Record<string, { dir: string; command: readonly string[] }>> = {
  python: { dir: 'python', command: [debian('python3'), 'postback_receiver.py'] },
  go: { dir: 'go', command: [debian('go'), 'run', 'postback_receiver.go'] },
};

const children: ChildProcess[] = [];
const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const close of closers.reverse()) await close();
  for (const child of children) stopGroup(child, 'SIGKILL');
});

/** Signals the receiver's process group (the receiver, and the program `go run` built). */
function stopGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // already gone
  }
}

/** Starts a receiver on port 0 and resolves with its URL once it says where it listens. */
async function startReceiver(name: string, env: NodeJS.ProcessEnv): Promise<string> {
  const { dir, command } = RECEIVERS[name]!;
  const [program, ...args] = command;
  const child = spawn(program!, args, {
    cwd: `${EXAMPLES}${dir}`,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group: `go run` starts the built program as a child of its own, and both are stopped.
    detached: true,
  });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  closers.push(async () => {
    const closed = new Promise((resolve) =>
      child.exitCode === null ? child.once('close', resolve) : resolve(undefined),
    );
    stopGroup(child, 'SIGTERM');
    await closed;
  });
  await waitFor(`${name} receiver listening (stderr: ${stderr})`, () => /listening on (\S+)/.test(stdout), 60_000);
  return /listening on (\S+)/.exec(stdout)![1]!;
}

interface Stored {
  readonly webhook_id: string;
  readonly transaction_id: string;
  readonly status: string;
}

function storedLines(file: string): Stored[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Stored);
}

async function post(url: string, headers: Record<string, string>, body: string): Promise<number> {
  const answer = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  await answer.arrayBuffer();
  return answer.status;
}

for (const name of Object.keys(RECEIVERS)) {
  describe(`examples/${RECEIVERS[name]!.dir}/${RECEIVERS[name]!.command.at(-1)!}`, () => {
    it('stores a real postback from the simulator through the sidecar once; refuses forgeries', async () => {
      const secret = newForwardSecret();
      const store = join(scratchDir('receiver-store-'), 'postbacks.jsonl');
      const receiverUrl = await startReceiver(name, {
        POSTBACK_WEBHOOK_SECRET_FILE: await forwardSecretFile(secret),
        POSTBACK_STORE: store,
      });
      const webhookPath = `${receiverUrl}/postbacks`;

      const keys = await makeKeys();
      const port = await freeStablePort();
      const publicUrl = `http://127.0.0.1:${port}/hooks/payments`;
      const sim: RunningSimulator = await startSimulator({
        accounts: [
          {
            username: TEST_USERNAME,
            password: TEST_PASSWORD,
            publicKeyPem: keys.publicKeyPem,
            webhookUrl: publicUrl,
            signedPostbacks: true,
          },
        ],
        postbackRetry: { initialDelayMs: 100, maxDelayMs: 200 },
      });
      closers.push(() => sim.close());
      const keyFile = join(scratchDir('sim-postback-key-'), 'gateway-postback.pub.pem');
      await writeFile(keyFile, sim.postbackPublicKeyPem);
      const running = await startTestSidecar(
        await sidecarEnv(keys, sim.baseUrl, {
          SIDECAR_POSTBACK_FORWARD_URL: webhookPath,
          SIDECAR_POSTBACK_FORWARD_SECRET_FILE: await forwardSecretFile(secret),
          SIDECAR_POSTBACK_PUBLIC_URL: publicUrl,
          SIDECAR_POSTBACK_PUBLIC_KEY_FILE: keyFile,
          SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
          SIDECAR_POSTBACK_LISTEN_PORT: String(port),
        }),
      );
      closers.push(() => running.stop());
      await waitUntilReady(running.sidecar);

      const answer = await postJson(running.sidecar.egressUrl, deposit());
      assert.equal(answer.status, 200, answer.body);
      const id = (JSON.parse(answer.body) as { transaction_id: string }).transaction_id;
      await sim.complete(id, 'SUCCESS');
      await waitFor('the postback stored', () => storedLines(store).length === 1, 20_000);
      await waitFor(
        'the gateway told 2xx',
        () => sim.postbacks().some((attempt) => attempt.status !== undefined && attempt.status < 300),
        20_000,
      );
      const [stored] = storedLines(store);
      assert.equal(stored?.transaction_id, id);
      assert.equal(stored?.status, 'SUCCESS');

      // The same postback delivered again (a redelivery after a lost 2xx): answered 2xx, not stored twice.
      const body = JSON.stringify({ transaction_id: id, status: 'SUCCESS' });
      const signer = new Webhook(secret);
      const again = (webhookId: string, at: Date, text = body) => ({
        'webhook-id': webhookId,
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': signer.sign(webhookId, at, text),
      });
      assert.equal(await post(webhookPath, again(stored.webhook_id, new Date()), body), 200);
      assert.equal(storedLines(store).length, 1, 'deduplicated by webhook-id');

      // Forgeries: nothing stored.
      const forger = new Webhook(newForwardSecret());
      const now = new Date();
      const forgedId = 'msg_forged';
      const forged = {
        'webhook-id': forgedId,
        'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
        'webhook-signature': forger.sign(forgedId, now, body),
      };
      assert.equal(await post(webhookPath, forged, body), 401, 'another secret');
      assert.equal(await post(webhookPath, again(forgedId, new Date(Date.now() - 10 * 60_000)), body), 401, 'stale');
      assert.equal(await post(webhookPath, again(forgedId, new Date()), body.replace('SUCCESS', 'FAILED')), 401);
      assert.equal(await post(webhookPath, { 'webhook-id': forgedId }, body), 401, 'unsigned');
      // The control: the same message, signed with the right secret now, is stored.
      assert.equal(await post(webhookPath, again(forgedId, new Date()), body), 200);
      assert.deepEqual(
        storedLines(store).map((line) => line.webhook_id),
        [stored.webhook_id, forgedId],
      );
    });
  });
}
