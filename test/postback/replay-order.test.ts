// `postbacks replay` of a dead letter on a real Redis and a real sidecar: by default the replayed postback goes back
// in its transaction's line by arrival, before the later postbacks still waiting (a later one waiting for its retry
// steps back); `--at-end` puts it behind them; a later postback already delivered is not undone, and the replayed
// one reaches the application after it (docs/runbooks.md, "postback dead letters").
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { postbacks } from '../../src/cli/postbacks.js';
import { startRedis } from '../support/redis-server.js';
import { waitFor } from '../support/wait-for.js';
import { runCommand } from '../tools/run-command.js';
import { deliver, gatewayKeys, ApplicationStub, signPostback, startSignedReceiver, type Received } from './support.js';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

interface Status {
  readonly transaction_id: string;
  readonly status: string;
}

const statusOf = (received: Received): Status => JSON.parse(received.body.toString('utf8')) as Status;
/** What one transaction's application saw, in order: `<status>#<attempt>`. */
const seenBy = (application: ApplicationStub, transaction: string): string[] =>
  application.received
    .filter((r) => statusOf(r).transaction_id === transaction)
    .map((r) => `${statusOf(r).status}#${String(r.headers['x-postback-attempt'])}`);

describe('replaying a dead letter', { timeout: 90_000 }, () => {
  test('goes before its transaction’s later postbacks still waiting; --at-end behind them; after one delivered', async () => {
    const application = await new ApplicationStub().start();
    // The application refuses the postbacks named here (`<transaction>/<status>`) and takes every other.
    const refused = new Set<string>();
    application.status = () => {
      const last = statusOf(application.received.at(-1)!);
      return refused.has(`${last.transaction_id}/${last.status}`) ? 500 : 200;
    };
    const [redis, gateway] = await Promise.all([startRedis(), gatewayKeys()]);
    cleanups.push(() => redis.close());
    // Two attempts 4 s apart: long enough that a postback refused once is still waiting for its retry at the replay.
    const world = await startSignedReceiver(
      gateway,
      {
        SIDECAR_STATE_STORE: 'redis',
        SIDECAR_REDIS_URL: redis.url,
        SIDECAR_POSTBACK_DELIVERY: 'queued',
        SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,4s',
      },
      application,
    );
    cleanups.push(() => world.stop());
    const ids = new Map<string, string>();
    const send = async (transaction: string, status: string) => {
      const payload = JSON.stringify({ transaction_id: transaction, status });
      const answer = await deliver(world.receiverUrl, await signPostback(gateway.privateKeyPem, { payload }));
      assert.deepEqual(answer.body, { status: 'accepted' });
    };
    const idOf = (transaction: string, status: string) =>
      String(
        application.received.find((r) => statusOf(r).transaction_id === transaction && statusOf(r).status === status)
          ?.headers['x-postback-id'],
      );

    // Three transactions whose first postback, `PROCESSING`, dies; `tx-late`'s later SUCCESS waits behind it,
    // then is delivered once it is dead.
    for (const transaction of ['tx-order', 'tx-end', 'tx-late']) refused.add(`${transaction}/PROCESSING`);
    for (const transaction of ['tx-order', 'tx-end', 'tx-late']) await send(transaction, 'PROCESSING');
    await send('tx-late', 'SUCCESS');
    const dead = async () => (await runCommand(postbacks, ['list', '--dead', '--json'], world.env)).stdout;
    await waitFor('three dead letters', async () => (await dead()).trim().split('\n').length === 3, 20_000);
    await waitFor('tx-late SUCCESS delivered', () => seenBy(application, 'tx-late').includes('SUCCESS#1'), 10_000);
    for (const transaction of ['tx-order', 'tx-end', 'tx-late']) ids.set(transaction, idOf(transaction, 'PROCESSING'));

    // `tx-order` and `tx-end`: a later SUCCESS refused once (now waiting for its retry), then a FAILED behind it.
    for (const transaction of ['tx-order', 'tx-end']) {
      refused.add(`${transaction}/SUCCESS`);
      await send(transaction, 'SUCCESS');
      await send(transaction, 'FAILED');
    }
    await waitFor(
      'both SUCCESS refused once',
      () => ['tx-order', 'tx-end'].every((t) => seenBy(application, t).includes('SUCCESS#1')),
      10_000,
    );
    // The application has each SUCCESS before the sidecar has its refusal and records the retry, so the list is
    // read until it shows both (a SUCCESS still being delivered is `queued`), within the 4 s before the retry.
    const expected = ['retry', 'waiting', 'retry', 'waiting'];
    let states: string[] = [];
    const listStates = async () =>
      (await runCommand(postbacks, ['list', '--json'], world.env)).stdout
        .trim()
        .split('\n')
        .map((line) => (JSON.parse(line) as { state: string }).state);
    await waitFor(
      'each SUCCESS waiting for its retry',
      async () => (states = await listStates()).join() === expected.join(),
      3_000,
    ).catch(() => undefined);
    assert.deepEqual(states, expected, 'each SUCCESS waits for its retry, FAILED behind');

    // The application is fixed; the dead letters are replayed.
    refused.clear();
    for (const [transaction, extra] of [
      ['tx-order', []],
      ['tx-end', ['--at-end']],
      ['tx-late', []],
    ] as const) {
      const replayed = await runCommand(postbacks, ['replay', ids.get(transaction)!, ...extra], world.env);
      assert.equal(replayed.code, 0, replayed.stderr);
      assert.match(replayed.stdout, /replayed$/m);
    }
    await waitFor(
      'every postback delivered',
      () => seenBy(application, 'tx-order').length === 6 && seenBy(application, 'tx-end').length === 6,
      20_000,
    );
    await waitFor('tx-late replayed', () => seenBy(application, 'tx-late').length === 4, 10_000);
    // Time for a delivery out of order or twice to show up, if any were made.
    await new Promise((resolve) => setTimeout(resolve, 500));

    // Default: the replayed PROCESSING goes first; the SUCCESS waiting for its retry steps back (its attempts kept).
    assert.deepEqual(seenBy(application, 'tx-order'), [
      'PROCESSING#1',
      'PROCESSING#2',
      'SUCCESS#1',
      'PROCESSING#1',
      'SUCCESS#2',
      'FAILED#1',
    ]);
    // --at-end: behind every postback of its transaction still waiting.
    assert.deepEqual(seenBy(application, 'tx-end'), [
      'PROCESSING#1',
      'PROCESSING#2',
      'SUCCESS#1',
      'SUCCESS#2',
      'FAILED#1',
      'PROCESSING#1',
    ]);
    // A later postback already delivered: the replayed one still reaches the application, after it, same id.
    assert.deepEqual(seenBy(application, 'tx-late'), ['PROCESSING#1', 'PROCESSING#2', 'SUCCESS#1', 'PROCESSING#1']);
    const late = application.received.filter((r) => statusOf(r).transaction_id === 'tx-late').at(-1);
    assert.equal(late?.headers['x-postback-id'], ids.get('tx-late'));
    assert.equal((await dead()).trim(), '', 'no dead letter left');
  });
});
