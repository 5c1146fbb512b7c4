// Issue 60: the process as a whole within the pod's memory. A real `serve`, built as shipped (tsc's dist), runs
// inside a real 256 MiB memory cgroup (the example pod's limit), once with the image's node flags and once as plain
// `node dist/src/main.js serve`, which sizes its heap from the memory it sees. Its store holds keyed payments; then,
// for ATTACK_MS, a hostile neighbour floods all three ports with pipelined requests (the reviews' attacks: 64 KB of
// them per connection, hundreds of connections, again and again) and holds the postback port with unfinished
// headers, while callers go on paying and the gateway delivers genuine postbacks, delivering each again after any
// refusal as a gateway does. The sidecar must stay alive and under the limit (no OOM kill), answer every payment
// 2xx or 503 with nothing sent, replay the newest keys it held from before, and deliver every postback.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { IMAGE_RUNTIME } from '../support/image-runtime.js';
import { pipelined, pipelinedFlood, otherLoopbackAddresses, slowHeaderHolders } from '../support/floods.js';
import { assertSameAnswer, newKey, send, seriesValue, freshDeposit, type Reply } from '../support/idempotent-calls.js';
import { makeKeys } from '../support/keys.js';
import { createMemoryCgroup, memoryCgroupSkipReason, type MemoryCgroup } from '../support/memory-cgroup.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { ApplicationStub, gatewayKeys, keyFile, PATH, PUBLIC_URL, signPostback } from '../postback/support.js';

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const LIMIT_BYTES = 256 * 1024 * 1024;
const ATTACK_MS = 15_000;
/** Keyed payments the store holds before the attack, each with a 4 KB answer; the newest are replayed after it. */
const STORED = 400;
const NEWEST = 20;
const ANSWER_PAD = 4 * 1024;
const POSTBACKS = 40;
/** A gateway delivers a refused postback again; here every 500 ms, for as long as it takes (bounded by the test). */
const REDELIVERY_MS = 500;

const skip = memoryCgroupSkipReason();
/** tsc's output for this test alone, inside the checkout so that its imports find node_modules. */
const built = join(REPO_ROOT, '.scratch', `memory-limit-${process.pid}`);

interface Runtime {
  readonly name: string;
  readonly nodeArgs: readonly string[];
  readonly env: Readonly<Record<string, string>>;
}

const RUNTIMES: readonly Runtime[] = [
  { name: "the image's node flags", nodeArgs: IMAGE_RUNTIME.flags, env: IMAGE_RUNTIME.env },
  { name: 'plain node dist/src/main.js serve', nodeArgs: [], env: {} },
];

describe('one memory budget: a 256 MiB cgroup, every port flooded', { skip }, () => {
  before(() => {
    execFileSync(
      process.execPath,
      ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json', '--outDir', built],
      {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 120_000,
      },
    );
  });
  after(() => rmSync(built, { recursive: true, force: true }));

  for (const runtime of RUNTIMES) {
    it(
      `${runtime.name}: alive, under the limit, payments go on, keys replay, postbacks delivered`,
      { timeout: 150_000 },
      async (t) => {
        const gateway = await new RecordingGateway().start();
        const application = await new ApplicationStub().start();
        const postbackKeys = await gatewayKeys();
        const pad = 'x'.repeat(ANSWER_PAD);
        // Each stored answer its own (n): a replay of another key's answer would not pass for this one's.
        for (let n = 1; n <= STORED; n++) gateway.script.push({ status: 201, body: { status: 'PENDING', n, pad } });
        let cgroup: MemoryCgroup | undefined;
        let sidecar: SpawnedSidecar | undefined;
        try {
          cgroup = createMemoryCgroup('sidecar-memory', LIMIT_BYTES);
          const env = await sidecarEnv(await makeKeys(), gateway.url, {
            ...runtime.env,
            SIDECAR_LOG_LEVEL: 'info',
            SIDECAR_POSTBACK_FORWARD_URL: application.url,
            SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
            SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(postbackKeys.publicKeyPem),
            SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
            SIDECAR_POSTBACK_LISTEN_PORT: '0',
          });
          sidecar = await spawnSidecar(env, 30_000, runtime.nodeArgs, {
            program: [join(built, 'src', 'main.js')],
            launcher: cgroup.launcher,
          });
          const { child, proxyUrl, adminUrl } = sidecar;
          const postbackUrl = sidecar.postbackUrl!;
          const alive = () => child.exitCode === null && child.signalCode === null;

          // The store holds keyed payments, the newest kept here to replay after the attack.
          const newest: Array<{ key: string; payment: string; reply: Reply }> = [];
          for (let n = 0; n < STORED; n++) {
            const key = newKey();
            const payment = freshDeposit();
            const reply = await send(proxyUrl, key, payment);
            assert.equal(reply.status, 201, `stored payment ${n}: ${reply.body.toString('utf8').slice(0, 200)}`);
            newest.push({ key, payment, reply });
            if (newest.length > NEWEST) newest.shift();
          }
          const sentBefore = gateway.requests.length;

          // The attack, and beside it the callers and the gateway's postbacks.
          const until = Date.now() + ATTACK_MS;
          const sources = otherLoopbackAddresses(8);
          const target = (url: string) => ({ host: '127.0.0.1', port: Number(new URL(url).port), sources });
          const floods = Promise.all([
            pipelinedFlood(
              target(postbackUrl),
              256,
              pipelined(
                `POST ${PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
              ),
              until,
            ),
            pipelinedFlood(target(adminUrl), 128, pipelined('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'), until),
            // Callers' address: the egress listener is on loopback; a foreign Host is answered 421.
            pipelinedFlood(
              { ...target(proxyUrl), sources: ['127.0.0.1'] },
              512,
              pipelined('POST /api/v2/transaction/init HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\n\r\n'),
              until,
            ),
            slowHeaderHolders(
              target(postbackUrl),
              300,
              `POST ${PATH} HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(8_000)}`,
              until,
            ),
          ]);
          const answers: Reply[] = [];
          const paying = Promise.all(
            Array.from({ length: 4 }, async () => {
              while (Date.now() < until && alive()) {
                answers.push(await send(proxyUrl, newKey(), freshDeposit()).catch((err: unknown) => failedReply(err)));
              }
            }),
          );
          const postbacks = await Promise.all(
            Array.from({ length: POSTBACKS }, () => signPostback(postbackKeys.privateKeyPem)),
          );
          const delivering = Promise.all(
            postbacks.map(async (postback, i) => {
              await new Promise((resolve) => setTimeout(resolve, (i * ATTACK_MS) / POSTBACKS));
              return deliverUntilTaken(postbackUrl, postback, until + 60_000);
            }),
          );
          const [floodReports] = await Promise.all([floods, paying]);
          const postbackStatuses = await delivering;

          const { stderr } = sidecar.output();
          assert.ok(alive(), `the sidecar died:\n${stderr.slice(-2_000)}`);
          assert.doesNotMatch(stderr, /heap limit|out of memory/i);
          assert.equal(cgroup.oomKills(), 0, 'no process of the cgroup was killed for memory');
          assert.ok(cgroup.peakBytes() <= LIMIT_BYTES, `peak ${cgroup.peakBytes()}`);
          for (const report of floodReports.slice(0, 3)) {
            assert.ok(typeof report === 'object' && report.connections > 0, 'the floods ran');
          }

          // Payments went on: each answered 2xx, or 503 with nothing sent; the gateway saw exactly the 2xx ones.
          const ok = answers.filter((a) => a.status === 201).length;
          const refused = answers.filter((a) => a.status !== 201);
          for (const answer of refused) {
            assert.equal(answer.status, 503, `${answer.status} ${answer.body.toString('utf8').slice(0, 200)}`);
            assert.equal(answer.retryable, true);
          }
          assert.ok(ok > 0, `payments completed during the attack (${ok} of ${answers.length})`);
          assert.equal(gateway.requests.length, sentBefore + ok, 'nothing sent for a refused payment');

          // The newest keys of before the attack are still held: replayed, nothing sent.
          for (const { key, payment, reply } of newest) assertSameAnswer(await send(proxyUrl, key, payment), reply);
          assert.equal(gateway.requests.length, sentBefore + ok);

          // Every genuine postback was taken (200) in the end and reached the application.
          assert.deepEqual(
            postbackStatuses.filter((status) => status !== 200),
            [],
          );
          await application.waitFor(POSTBACKS, 10_000);

          // The refusals were counted, by listener.
          const metrics = await (await fetch(`${adminUrl}/metrics`)).text();
          const shed = (listener: string) =>
            seriesValue(metrics, `signing_sidecar_requests_shed_total{listener="${listener}"}`);
          t.diagnostic(
            `peak ${(cgroup.peakBytes() / 2 ** 20).toFixed(1)} MiB of 256; payments ${ok} ok, ${refused.length} ` +
              `refused; flood connections ${floodReports.map((r) => (typeof r === 'number' ? r : r.connections)).join('/')}; ` +
              `shed: egress ${shed('egress')}, postback ${shed('postback')}, admin ${shed('admin')}`,
          );
          for (const listener of ['egress', 'postback', 'admin']) {
            const pipelinedRefusals = seriesValue(
              metrics,
              `signing_sidecar_connections_refused_total{listener="${listener}",reason="pipelined"}`,
            );
            assert.ok((pipelinedRefusals ?? 0) > 0, `${listener}: pipelined refusals counted (${pipelinedRefusals})`);
          }
        } finally {
          await sidecar?.kill();
          await cgroup?.remove();
          await application.stop();
          await gateway.stop();
        }
      },
    );
  }
});

/** A payment the caller could not send at all: its status is 0 (the test then fails, naming the error). */
function failedReply(err: unknown): Reply {
  return {
    status: 0,
    headers: new Headers(),
    body: Buffer.from(String(err)),
    code: undefined,
    retryable: undefined,
    replayed: false,
  };
}

/** Delivers a postback as the gateway does: again after every answer but 200, until taken or `untilMs`. */
async function deliverUntilTaken(
  receiverUrl: string,
  postback: { headers: Record<string, string>; body: string },
  untilMs: number,
): Promise<number> {
  let status = 0;
  while (Date.now() < untilMs) {
    status = await fetch(`${receiverUrl}${PATH}`, { method: 'POST', headers: postback.headers, body: postback.body })
      .then(async (res) => {
        await res.arrayBuffer();
        return res.status;
      })
      .catch(() => 0);
    if (status === 200) return status;
    await new Promise((resolve) => setTimeout(resolve, REDELIVERY_MS));
  }
  return status;
}
