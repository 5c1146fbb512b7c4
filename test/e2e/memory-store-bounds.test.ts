// The memory store full before the heap is. Bounded by entries alone, a store of answers of a few KB
// outgrew V8's heap: the process died ("Reached heap limit", SIGABRT) with every idempotency key in it, and a
// caller's retry became a second payment. Here a real `serve` runs on a small heap and is sent more keyed payments
// with several-KB answers than its heap could hold: it must evict (counted), stay up and still replay the newest.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { containerLimitBytes, memoryBudget, MIB, POSTBACK_MAX_BODY_BYTES } from '../../src/memory/budget.js';
import { assertSameAnswer, freshDeposit, newKey, send, seriesValue, type Reply } from '../support/idempotent-calls.js';
import { makeKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { waitFor } from '../support/wait-for.js';

/** A 48 MiB old space: the store's `auto` budget is then 60 % of the 16 MiB beyond the heap's reserve, 9.6 MiB. */
const OLD_SPACE_MB = 48;
const HEAP_FLAGS = `--max-old-space-size=${OLD_SPACE_MB} --max-semi-space-size=4`;
/** Each kept answer takes about 22 KB of the store (its body in base64, plus the record). */
const ANSWER_PAD = 16 * 1024;
/** About 66 MB of answers: more than the whole heap, four times the budget. */
const PAYMENTS = 3_000;
const CALLERS = 12;
/** 3,000 payments take 10-25 s on a loaded 2-core machine. */
const FLOOD_DEADLINE_MS = 60_000;
/** The newest answers, replayed at the end. */
const NEWEST = 20;

/** The store's `auto` budget of a process with a 48 MiB old space on this machine (in a container or not). */
function autoStoreBytes(): number {
  return memoryBudget({
    limitMb: 'auto',
    process: {
      containerLimitBytes: containerLimitBytes(),
      oldSpaceBytes: OLD_SPACE_MB * MIB,
      heapLimitBytes: 60 * MIB,
    },
    maxBodyBytes: 1_048_576,
    maxPostbackBodyBytes: POSTBACK_MAX_BODY_BYTES,
  }).shares.store;
}

describe('memory store: bounded by bytes, so that it evicts before the heap runs out', () => {
  it(`a serve on a small heap sent ${PAYMENTS} keyed payments with 16 KB answers: no crash, evictions counted, the newest replay`, async () => {
    const gateway = await new RecordingGateway().start();
    const pad = 'x'.repeat(ANSWER_PAD);
    // Each answer its own (n): a replay of another key's answer would not pass for this one's.
    for (let n = 1; n <= PAYMENTS; n++) gateway.script.push({ status: 201, body: { status: 'PENDING', n, pad } });
    let sidecar: SpawnedSidecar | undefined;
    try {
      // Level info: serve announces its addresses on the "start" line.
      const env = await sidecarEnv(await makeKeys(), gateway.url, {
        SIDECAR_LOG_LEVEL: 'info',
        NODE_OPTIONS: HEAP_FLAGS,
      });
      sidecar = await spawnSidecar(env, 30_000);
      const { adminUrl, proxyUrl, child } = sidecar;
      // A process that runs out of heap dies by SIGABRT: no exit code.
      const alive = () => child.exitCode === null && child.signalCode === null;
      await waitFor('ready', async () => (await fetch(`${adminUrl}/readyz`)).status === 200, 15_000);
      const newest: Array<{ key: string; payment: string; reply: Reply }> = [];
      let sent = 0;
      let refused = '';
      const caller = async () => {
        while (sent < PAYMENTS && refused === '' && alive()) {
          sent++;
          const key = newKey();
          const payment = freshDeposit();
          const reply = await send(proxyUrl, key, payment);
          if (reply.status !== 201) refused = `${reply.status} ${reply.body.toString('utf8').slice(0, 200)}`;
          newest.push({ key, payment, reply });
          if (newest.length > NEWEST) newest.shift();
        }
      };
      // Bounded: a sidecar that stops answering (collecting without end) is killed, and the calls fail.
      const watchdog = setTimeout(() => void sidecar?.kill(), FLOOD_DEADLINE_MS);
      const failed = await Promise.all(Array.from({ length: CALLERS }, caller)).then(
        () => '',
        (err: unknown) => String(err),
      );
      clearTimeout(watchdog);
      const { stderr } = sidecar.output();
      assert.doesNotMatch(stderr, /heap limit|out of memory/i);
      assert.ok(alive(), `the sidecar died (${failed}):\n${stderr.slice(-2_000)}`);
      assert.equal(failed, '');
      assert.equal(refused, '', 'every payment answered by the gateway');
      assert.equal(gateway.requests.length, PAYMENTS);

      const metrics = await (await fetch(`${adminUrl}/metrics`)).text();
      const value = (name: string) => seriesValue(metrics, `signing_sidecar_state_store_${name}`) ?? Number.NaN;
      const limit = value('memory_limit_bytes');
      assert.equal(limit, autoStoreBytes(), 'auto, from the old space');
      assert.ok(limit < 20 * MIB, `the budget leaves most of the heap to the rest (${limit})`);
      assert.ok(value('evictions_total') > 0, 'the oldest answers were evicted to make room');
      assert.ok(value('memory_bytes') <= limit, `within the budget: ${value('memory_bytes')} of ${limit}`);
      assert.ok(value('memory_entries') < PAYMENTS);

      for (const { key, payment, reply } of newest) assertSameAnswer(await send(proxyUrl, key, payment), reply);
      assert.equal(gateway.requests.length, PAYMENTS, 'the replays sent nothing');
    } finally {
      await sidecar?.kill();
      await gateway.stop();
    }
  });

  it('serve refuses a budget above the old space at start: exit 2, one line naming the setting and the old space', async () => {
    const gateway = await new RecordingGateway().start();
    try {
      const env = await sidecarEnv(await makeKeys(), gateway.url, {
        NODE_OPTIONS: HEAP_FLAGS,
        SIDECAR_STATE_MEMORY_MAX_MB: '64',
      });
      const result = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts', 'serve'], {
        cwd: new URL('../../', import.meta.url).pathname,
        env: { PATH: process.env.PATH, ...env },
        encoding: 'utf8',
        timeout: 20_000,
      });
      assert.equal(result.status, 2);
      assert.match(
        result.stderr,
        /^signing-sidecar: configuration error: SIDECAR_STATE_MEMORY_MAX_MB \(state\.memoryMaxMb\): 64 MiB does not fit node's old space \(48 MiB\)[^\n]*\n$/,
      );
      assert.equal(gateway.grants.length, 0, 'refused before logging in');
    } finally {
      await gateway.stop();
    }
  });
});
