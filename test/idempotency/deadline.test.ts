import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { buildSchema } from '../../src/config/schema.js';
import { claimDeadlineMs, DEADLINE_MARGIN_MS } from '../../src/idempotency/deadline.js';
import { keeperFromConfig } from '../../src/idempotency/from-config.js';
import { idempotencyKey } from '../../src/idempotency/key.js';
import { decodeRecord } from '../../src/idempotency/record.js';
import { createLogger } from '../../src/observability/log.js';
import { requestDeadlineMs } from '../../src/egress/request-deadline.js';
import { MemoryStateStore } from '../../src/state/memory-store.js';
import { DEFAULT_WAIT_FOR_TOKEN_MS } from '../../src/token/token-manager.js';
import { makeKeys, type TestKeys } from '../support/keys.js';

describe('the request deadline, and the claim deadline derived from it (a claim older than this is abandoned)', () => {
  it('is 110 s with the default settings; a claim stands 115 s in memory, 115.2 s on Redis, as docs/idempotency.md says', () => {
    const schema = buildSchema({});
    const defaults = { tokenWaitMs: DEFAULT_WAIT_FOR_TOKEN_MS, ...schema.get('upstream') };
    assert.equal(requestDeadlineMs(defaults), 110_000);
    assert.equal(claimDeadlineMs(requestDeadlineMs(defaults), 0), 115_000);
    const redisCommandTimeoutMs = schema.get('state.redis.commandTimeoutMs');
    assert.equal(claimDeadlineMs(requestDeadlineMs(defaults), redisCommandTimeoutMs), 115_200);
  });

  it('request: 2 x token wait + connect retry deadline + 2 x (2 x connect timeout + response timeout); claim: + 2 x store write + margin', () => {
    const settings = { tokenWaitMs: 1, connectTimeoutMs: 10, responseTimeoutMs: 100, connectRetryDeadlineMs: 1_000 };
    assert.equal(requestDeadlineMs(settings), 2 + 1_000 + 2 * (20 + 100));
    assert.equal(claimDeadlineMs(requestDeadlineMs(settings), 3), 2 + 1_000 + 2 * (20 + 100) + 6 + DEADLINE_MARGIN_MS);
  });

  it('grows with every setting that can lengthen a request', () => {
    const base = {
      tokenWaitMs: 10_000,
      connectTimeoutMs: 5_000,
      responseTimeoutMs: 30_000,
      connectRetryDeadlineMs: 10_000,
    };
    for (const key of Object.keys(base) as Array<keyof typeof base>) {
      assert.ok(requestDeadlineMs({ ...base, [key]: base[key] + 1 }) > requestDeadlineMs(base), key);
    }
    assert.ok(claimDeadlineMs(requestDeadlineMs(base), 101) > claimDeadlineMs(requestDeadlineMs(base), 100));
  });
});

describe('the deadline a sidecar writes into its claims', () => {
  let keys: TestKeys;
  before(async () => {
    keys = await makeKeys();
  });

  /** The deadline of a claim made at `now` by the keeper these settings build, minus `now`. */
  async function claimDeadlineMs(env: NodeJS.ProcessEnv): Promise<number> {
    const config = loadConfig({
      SIDECAR_BASE_URL: 'https://gateway.example.com',
      SIDECAR_ENVIRONMENT: 'staging',
      SIDECAR_USERNAME: 'vendor@example.com',
      SIDECAR_PASSWORD: 'pw',
      SIDECAR_PRIVATE_KEY_FILE: keys.privateKeyFile,
      ...env,
    });
    const store = new MemoryStateStore();
    const now = 1_700_000_000_000;
    // As app.ts: the request deadline from the TokenManager's token wait (it is given none: its default).
    const requestDeadline = requestDeadlineMs({ ...config.upstream, tokenWaitMs: DEFAULT_WAIT_FOR_TOKEN_MS });
    const keeper = keeperFromConfig(config, requestDeadline, store, createLogger('silent'), () => now);
    const key = idempotencyKey('deadline-key')!;
    assert.equal((await keeper.claim(key, 'fp', 'req-1')).kind, 'new');
    const record = decodeRecord((await store.get(`idempotency:${key.sha256}`))!);
    await store.close();
    assert.equal(record.state, 'in_progress');
    return record.state === 'in_progress' ? record.deadline - now : Number.NaN;
  }

  it("counts TokenManager's own token wait, the upstream settings, the Redis command timeout and replica waits", async () => {
    assert.equal(await claimDeadlineMs({}), 115_000);
    const redis = { SIDECAR_STATE_STORE: 'redis', SIDECAR_REDIS_URL: 'redis://127.0.0.1:6379' };
    assert.equal(await claimDeadlineMs(redis), 115_200);
    assert.equal(await claimDeadlineMs({ ...redis, SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000' }), 119_000);
    // A write that waits for replicas is two commands: the write, then WAIT.
    assert.equal(await claimDeadlineMs({ ...redis, SIDECAR_REDIS_MIN_REPLICAS_ACKED: '1' }), 115_400);
    assert.equal(await claimDeadlineMs({ SIDECAR_UPSTREAM_RESPONSE_TIMEOUT_MS: '10000' }), 75_000);
  });
});
