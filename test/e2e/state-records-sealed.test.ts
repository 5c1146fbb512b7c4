// Every record the sidecar writes to Redis is sealed with its MAC, bound to its key, and every key it writes is in
// docs/security.md's table of records. The test watches Redis itself (MONITOR: every command, those run inside
// scripts too) while a sidecar with SIDECAR_STATE_MAC_KEY_FILE logs in, takes keyed and unkeyed payments and receives
// queued postbacks, one of which fails once. A string written without a MAC that opens for its key, a postback entry
// without its MAC field, or a key of a kind nobody documented fails it: a record the sidecar would read back unchecked.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createSecretKey, randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { RecordMac } from '../../src/state/record-mac.js';
import type { RedisStateStore } from '../../src/state/redis-store.js';
import { freshDeposit, newKey, send } from '../support/idempotent-calls.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';
import {
  ApplicationStub,
  deliver,
  gatewayKeys,
  keyFile,
  payloadJson,
  PUBLIC_URL,
  signPostback,
} from '../postback/support.js';

/**
 * Every kind of key the sidecar writes, as docs/security.md names it. `sealed`: a string record, which must open
 * under the MAC for its own key; `entry`: the postback's hash, whose `mac` field covers it; `index`: a list of
 * postback ids (a stream, sorted sets, a line), each id leading to a sealed entry; `counter`: the store's generation,
 * a bare number (earlier versions raise it in a script of their own; a forged one only declares a rollback).
 */
const KINDS = [
  { documented: 'token:record', pattern: /^token:record$/, form: 'sealed' },
  { documented: 'token:lock', pattern: /^token:lock$/, form: 'sealed' },
  { documented: 'token:login-cooldown', pattern: /^token:login-cooldown$/, form: 'sealed' },
  { documented: 'idempotency:<sha256>', pattern: /^idempotency:[0-9a-f]{64}$/, form: 'sealed' },
  { documented: 'idempotency:<sha256>:lease:<claim>', pattern: /^idempotency:[0-9a-f]{64}:lease:.+$/, form: 'sealed' },
  { documented: 'postback:nonce:<nonce>', pattern: /^postback:nonce:.+$/, form: 'sealed' },
  { documented: 'postback:inflight:<digest>', pattern: /^postback:inflight:[0-9a-f]{64}$/, form: 'sealed' },
  { documented: 'postback:delivered:<digest>', pattern: /^postback:delivered:[0-9a-f]{64}$/, form: 'sealed' },
  { documented: 'postback:settled:<id>', pattern: /^postback:settled:.+$/, form: 'sealed' },
  { documented: 'postback:requeue-mark', pattern: /^postback:requeue-mark$/, form: 'sealed' },
  { documented: 'postback:entry:<id>', pattern: /^postback:entry:.+$/, form: 'entry' },
  { documented: 'postback:inbox', pattern: /^postback:inbox$/, form: 'index' },
  { documented: 'postback:pending', pattern: /^postback:pending$/, form: 'index' },
  { documented: 'postback:retry', pattern: /^postback:retry$/, form: 'index' },
  { documented: 'postback:dead', pattern: /^postback:dead$/, form: 'index' },
  { documented: 'postback:order:<transaction>', pattern: /^postback:order:.+$/, form: 'index' },
  { documented: 'limit:<rule>', pattern: /^limit:[a-z0-9_.-]+$/, form: 'sealed' },
  { documented: 'store:epoch', pattern: /^store:epoch$/, form: 'sealed' },
  { documented: 'store:generation', pattern: /^store:generation$/, form: 'counter' },
] as const;

/** Commands that write a whole string value: [key, value] at these argument positions. */
const STRING_WRITES = new Set(['SET']);
/** Commands that only read, or subscribe: nothing to check. */
const READS = new Set([
  'GET',
  'EXISTS',
  'PTTL',
  'HMGET',
  'HGETALL',
  'HGET',
  'ZRANGE',
  'ZRANGEBYSCORE',
  'ZCARD',
  'ZSCORE',
  'LINDEX',
  'LRANGE',
  'LLEN',
  'XREADGROUP',
  'XAUTOCLAIM',
  'XPENDING',
  'INFO',
  'PING',
  'WAIT',
  'EVALSHA',
  'EVAL',
  'SCRIPT',
  'SUBSCRIBE',
  'PUBLISH',
  'CLIENT',
  'HELLO',
  'SELECT',
  'AUTH',
  'ROLE',
  'COMMAND',
  'MONITOR',
]);

let redis: TestRedis;
let keys: TestKeys;
let gateway: TestKeys;
let simulator: RunningSimulator;
let application: ApplicationStub;
let sidecar: TestSidecar | undefined;
const MAC_KEY = randomBytes(32);

before(async () => {
  [redis, keys, gateway] = await Promise.all([startRedis(), makeKeys(), gatewayKeys()]);
  simulator = await startSimulator({
    accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
  });
  application = await new ApplicationStub().start();
});
after(async () => {
  await sidecar?.stop().catch(() => undefined);
  await application?.stop();
  await simulator?.close();
  await redis?.close();
});

/** MONITOR's arguments: `"..."` each, with `\"`, `\\`, `\n`, `\r`, `\t` and `\xHH` escaped. */
function monitorArguments(line: string): string[] {
  const args: string[] = [];
  for (const [, quoted = ''] of line.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
    args.push(
      quoted.replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, escape: string) => {
        if (escape.startsWith('x') && escape.length === 3) return String.fromCharCode(parseInt(escape.slice(1), 16));
        return ({ n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' } as Record<string, string>)[escape] ?? escape;
      }),
    );
  }
  return args;
}

describe('every record the sidecar writes to Redis, watched with MONITOR', { timeout: 120_000 }, () => {
  it('is sealed for its own key, or is an index of sealed entries; and docs/security.md names its kind', async () => {
    const monitor = spawn('redis-cli', ['-u', redis.url, 'MONITOR'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines: string[] = [];
    createInterface({ input: monitor.stdout }).on('line', (line) => lines.push(line));
    try {
      await waitFor('MONITOR attached', () => lines.some((line) => line.startsWith('OK')), 5_000);
      const macKeyFile = join(keys.dir, 'state-mac-key');
      await writeFile(macKeyFile, `${MAC_KEY.toString('base64')}\n`, { mode: 0o600 });
      // A money limit on deposits, far above the two payments: its record is written (and given back on a refusal).
      const limitsFile = join(keys.dir, 'limits.yaml');
      await writeFile(
        limitsFile,
        'rules: [{ name: sealed-deposits, route: /api/v2/transaction/init, windows: [{ period: 1h, maxTotal: "1000000" }] }]\n',
      );
      const env = await sidecarEnv(keys, simulator.baseUrl, {
        SIDECAR_LIMITS_FILE: limitsFile,
        SIDECAR_STATE_STORE: 'redis',
        SIDECAR_REDIS_URL: redis.url,
        SIDECAR_REDIS_COMMAND_TIMEOUT_MS: '2000',
        SIDECAR_STATE_MAC_KEY_FILE: macKeyFile,
        SIDECAR_POSTBACK_DELIVERY: 'queued',
        SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,500ms',
        SIDECAR_POSTBACK_FORWARD_URL: application.url,
        SIDECAR_POSTBACK_PUBLIC_URL: PUBLIC_URL,
        SIDECAR_POSTBACK_LISTEN_HOST: '127.0.0.1',
        SIDECAR_POSTBACK_LISTEN_PORT: '0',
        SIDECAR_POSTBACK_PUBLIC_KEY_FILE: await keyFile(gateway.publicKeyPem),
      });
      sidecar = await startTestSidecar(env);
      await waitUntilReady(sidecar.sidecar, 10_000);
      // A keyed payment (claim, lease, answer), an unkeyed one, and two postbacks: one delivered at once, one refused
      // by the application once and delivered on its retry.
      assert.ok((await send(sidecar.sidecar.egressUrl, newKey(), freshDeposit())).status < 300);
      assert.ok((await send(sidecar.sidecar.egressUrl, undefined, freshDeposit())).status < 300);
      const postbackUrl = sidecar.sidecar.postbackUrl ?? '';
      const failOnce = payloadJson('tx-sealed-retry');
      let refusedOnce = false;
      application.status = () => {
        // Called once the postback is received: the last one is the one being answered.
        if (refusedOnce || application.received.at(-1)?.body.toString('utf8') !== failOnce) return 200;
        refusedOnce = true;
        return 500;
      };
      for (const payload of [payloadJson('tx-sealed-first'), failOnce]) {
        const answer = await deliver(postbackUrl, await signPostback(gateway.privateKeyPem, { payload }));
        assert.equal(answer.body.status, 'accepted');
      }
      await waitFor(
        'both postbacks delivered, one on its retry',
        () => application.received.filter((r) => r.body.toString('utf8') === failOnce).length === 2,
        10_000,
      );
      // A generation check after the deliveries, then everything MONITOR saw.
      await new Promise((resolve) => setTimeout(resolve, 2_500));
    } finally {
      monitor.kill();
    }

    const store = sidecar.sidecar.store as RedisStateStore;
    const scope = store.storedKey('');
    const verdicts: string[] = [];
    const mac = new RecordMac({
      keys: [createSecretKey(MAC_KEY)],
      scope,
      acceptUnsigned: false,
      onRejected: ({ key, reason }) => verdicts.push(`${key}: ${reason}`),
    });
    const seen = new Set<string>();
    for (const line of lines) {
      const [command = '', ...args] = monitorArguments(line);
      const name = command.toUpperCase();
      if (name === '' || READS.has(name)) continue;
      // XGROUP CREATE <key> ...: the key after the subcommand.
      const key = (name === 'XGROUP' ? args[1] : args[0]) ?? '';
      assert.ok(key.startsWith(scope), `${name} on a key outside the account's scope: ${key}`);
      const short = key.slice(scope.length);
      const kind = KINDS.find(({ pattern }) => pattern.test(short));
      assert.ok(kind !== undefined, `a key of a kind docs/security.md does not name: ${short} (${name})`);
      seen.add(kind.documented);
      if (kind.form === 'sealed' && STRING_WRITES.has(name)) {
        const opened = mac.open(short, args[1] ?? '');
        assert.ok('content' in opened, `${short} written without its MAC (${verdicts.at(-1) ?? ''})`);
      } else if (kind.form === 'sealed') {
        assert.ok(['DEL', 'PEXPIRE'].includes(name), `${name} on the sealed record ${short}`);
      } else if (kind.form === 'counter') {
        assert.ok(name === 'SET' && /^\d+$/.test(args[1] ?? ''), `${name} on the counter ${short}: a number only`);
      } else if (kind.form === 'entry' && name === 'HSET' && args.includes('payload')) {
        const field = (f: string) => args[args.indexOf(f) + 1] ?? '';
        const rejected = mac.check(
          'postback',
          short,
          [field('payload'), field('headers'), field('order')],
          field('mac'),
        );
        assert.equal(rejected, undefined, `${short} kept without its MAC`);
      }
    }
    // The workload reached the records that matter, transient ones included.
    for (const expected of [
      'token:record',
      'token:lock',
      'token:login-cooldown',
      'idempotency:<sha256>',
      'idempotency:<sha256>:lease:<claim>',
      'postback:nonce:<nonce>',
      'postback:inflight:<digest>',
      'postback:delivered:<digest>',
      'postback:settled:<id>',
      'postback:entry:<id>',
      'postback:retry',
      'store:epoch',
      'store:generation',
    ]) {
      assert.ok(seen.has(expected), `the workload never wrote ${expected}`);
    }
    const security = await readFile(new URL('../../docs/security.md', import.meta.url), 'utf8');
    for (const { documented } of KINDS) {
      assert.ok(security.includes(`\`${documented}\``), `docs/security.md does not name ${documented}`);
    }
  });
});
