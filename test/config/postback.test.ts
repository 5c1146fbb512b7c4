import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { createSecretKey } from 'node:crypto';
import { collectConfig, loadConfig } from '../../src/config/load.js';
import { resolveDelivery } from '../../src/config/postback-settings.js';
import { sourceAllowed } from '../../src/postback/handler.js';
import { signedPostbackUrl } from '../../src/postback/public-url.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { scratchDir } from '../support/scratch.js';
import { productionEnv } from './support.js';

describe('config: the postback receiver', () => {
  let keys: TestKeys;
  let gateway: TestKeys;
  let next: TestKeys;
  let small: TestKeys;
  let env: NodeJS.ProcessEnv;
  let dir: string;
  /** The forward secret of `env`, as `openssl rand -base64 32` gives it, with the newline `echo` leaves. */
  const forwardSecret = `whsec_${randomBytes(32).toString('base64')}`;

  before(async () => {
    [keys, gateway, next, small] = await Promise.all([makeKeys(), makeKeys(), makeKeys(), makeKeys(1024)]);
    dir = scratchDir('postback-config-');
    const secretFile = join(dir, 'forward-secret');
    await writeFile(secretFile, `${forwardSecret}\n`);
    env = {
      ...productionEnv(keys.privateKeyFile),
      SIDECAR_POSTBACK_FORWARD_URL: 'http://127.0.0.1:3000/postbacks',
      SIDECAR_POSTBACK_PUBLIC_URL: 'https://Pay.Example.com:443/gateway/postbacks?',
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: gateway.publicKeyFile,
      SIDECAR_POSTBACK_FORWARD_SECRET_FILE: secretFile,
    };
  });

  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };

  /** Every refusal of one run, as `serve` and `check` print them. */
  const refusals = async (overrides: NodeJS.ProcessEnv): Promise<string[]> => {
    const result = await collectConfig({ ...env, ...overrides });
    assert.equal(result.ok, false, 'refused');
    return result.ok ? [] : result.errors.map((e) => e.message);
  };

  it('is off unless the forward URL is set, whatever else is', () => {
    assert.equal(loadConfig({ ...env, SIDECAR_POSTBACK_FORWARD_URL: undefined }).postback, undefined);
  });

  it('applies the contract defaults and canonicalises the public URL by spec 5.2', () => {
    const postback = loadConfig(env).postback!;
    assert.deepEqual(postback.listen, { host: '0.0.0.0', port: 8081 });
    assert.equal(postback.forwardTimeoutMs, 10_000);
    assert.equal(postback.maxAgeSeconds, 60);
    assert.equal(postback.maxFutureSeconds, 5);
    assert.equal(postback.deliveredTtlSeconds, 86_400);
    assert.equal(postback.acceptUnsigned, false);
    assert.equal(postback.allowCidrs, undefined);
    assert.equal(postback.publicUrl.path, '/gateway/postbacks');
    assert.equal(signedPostbackUrl(postback.publicUrl), 'https://pay.example.com/gateway/postbacks');
    assert.equal(postback.publicKeys.length, 1);
  });

  it('keeps a non-empty query of the public URL byte for byte', () => {
    const postback = loadConfig({ ...env, SIDECAR_POSTBACK_PUBLIC_URL: 'https://h.example/p/?b=2&a=1' }).postback!;
    assert.equal(signedPostbackUrl(postback.publicUrl), 'https://h.example/p/?b=2&a=1');
  });

  it('reads every key of a file that holds several (a rotation)', async () => {
    const both = await file('both.pem', `${gateway.publicKeyPem}\n${next.publicKeyPem}`);
    assert.equal(loadConfig({ ...env, SIDECAR_POSTBACK_PUBLIC_KEY_FILE: both }).postback!.publicKeys.length, 2);
  });

  it('reads the allowed ranges, IPv4 and IPv6, and matches IPv4-mapped sources', () => {
    const postback = loadConfig({
      ...env,
      SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'true',
      SIDECAR_POSTBACK_ALLOW_CIDRS: '203.0.113.0/24, 2001:db8::/32,198.51.100.7',
    }).postback!;
    assert.deepEqual(postback.allowCidrs?.ranges, ['203.0.113.0/24', '2001:db8::/32', '198.51.100.7']);
    assert.equal(sourceAllowed(postback.allowCidrs, '203.0.113.9'), true);
    assert.equal(sourceAllowed(postback.allowCidrs, '::ffff:203.0.113.9'), true);
    assert.equal(sourceAllowed(postback.allowCidrs, '2001:db8::1'), true);
    assert.equal(sourceAllowed(postback.allowCidrs, '198.51.100.7'), true);
    assert.equal(sourceAllowed(postback.allowCidrs, '198.51.100.8'), false);
    assert.equal(sourceAllowed(postback.allowCidrs, undefined), false);
  });

  it('accepts unsigned postbacks without a key file when the ranges are given', () => {
    const postback = loadConfig({
      ...env,
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: undefined,
      SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'true',
      SIDECAR_POSTBACK_ALLOW_CIDRS: '10.0.0.0/8',
    }).postback!;
    assert.equal(postback.publicKeys.length, 0);
  });

  const cases: Array<[string, NodeJS.ProcessEnv | (() => Promise<NodeJS.ProcessEnv>), RegExp]> = [
    [
      'SIDECAR_POSTBACK_PUBLIC_URL',
      { SIDECAR_POSTBACK_PUBLIC_URL: undefined },
      /is required when the postback receiver is on/,
    ],
    [
      'SIDECAR_POSTBACK_PUBLIC_URL',
      { SIDECAR_POSTBACK_PUBLIC_URL: 'pay.example.com/postbacks' },
      /not an absolute URL/,
    ],
    [
      'SIDECAR_POSTBACK_PUBLIC_URL',
      { SIDECAR_POSTBACK_PUBLIC_URL: 'https://h.example/p#frag' },
      /not an absolute URL without fragment/,
    ],
    ['SIDECAR_POSTBACK_PUBLIC_URL', { SIDECAR_POSTBACK_PUBLIC_URL: 'https://u:p@h.example/p' }, /credentials/],
    ['SIDECAR_POSTBACK_PUBLIC_URL', { SIDECAR_POSTBACK_PUBLIC_URL: 'https://h.example/a b' }, /canonical form/],
    [
      'SIDECAR_POSTBACK_PUBLIC_URL',
      { SIDECAR_POSTBACK_PUBLIC_URL: 'http://pay.example.com/p' },
      /production requires https/,
    ],
    [
      'SIDECAR_POSTBACK_FORWARD_URL',
      { SIDECAR_POSTBACK_FORWARD_URL: 'ftp://127.0.0.1/x' },
      /scheme ftp: is not supported/,
    ],
    ['SIDECAR_POSTBACK_FORWARD_URL', { SIDECAR_POSTBACK_FORWARD_URL: 'not a url' }, /not an absolute URL/],
    [
      'SIDECAR_POSTBACK_PUBLIC_KEY_FILE',
      { SIDECAR_POSTBACK_PUBLIC_KEY_FILE: undefined },
      /required unless SIDECAR_POSTBACK_ACCEPT_UNSIGNED/,
    ],
    [
      'SIDECAR_POSTBACK_PUBLIC_KEY_FILE',
      { SIDECAR_POSTBACK_PUBLIC_KEY_FILE: '/nonexistent/k.pem' },
      /cannot read file .*ENOENT/,
    ],
    [
      'SIDECAR_POSTBACK_ACCEPT_UNSIGNED',
      { SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'true' },
      /requires SIDECAR_POSTBACK_ALLOW_CIDRS/,
    ],
    ['SIDECAR_POSTBACK_ACCEPT_UNSIGNED', { SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'yes' }, /true or false/],
    [
      'SIDECAR_POSTBACK_ALLOW_CIDRS',
      { SIDECAR_POSTBACK_ACCEPT_UNSIGNED: 'true', SIDECAR_POSTBACK_ALLOW_CIDRS: '203.0.113.0/24,::/0' },
      /"::\/0" admits every address/,
    ],
    [
      'SIDECAR_POSTBACK_ALLOW_CIDRS',
      { SIDECAR_POSTBACK_ALLOW_CIDRS: '10.0.0.0/33' },
      /"10.0.0.0\/33" is not an IP address or CIDR/,
    ],
    [
      'SIDECAR_POSTBACK_ALLOW_CIDRS',
      { SIDECAR_POSTBACK_ALLOW_CIDRS: 'gateway.example.com' },
      /not an IP address or CIDR/,
    ],
    ['SIDECAR_POSTBACK_LISTEN_PORT', { SIDECAR_POSTBACK_LISTEN_PORT: '8080' }, /also SIDECAR_LISTEN_PORT/],
    ['SIDECAR_POSTBACK_LISTEN_PORT', { SIDECAR_POSTBACK_LISTEN_PORT: '9464' }, /also SIDECAR_ADMIN_PORT/],
    ['SIDECAR_POSTBACK_DELIVERED_TTL_SECONDS', { SIDECAR_POSTBACK_DELIVERED_TTL_SECONDS: '60' }, /at least 95 s/],
    ['SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS', { SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '0' }, /positive integer/],
  ];
  for (const [setting, overrides, reason] of cases) {
    it(`refuses ${setting}: ${reason.source}`, async () => {
      const messages = await refusals(typeof overrides === 'function' ? await overrides() : overrides);
      assert.ok(
        messages.some((m) => m.startsWith(setting) && reason.test(m)),
        `${setting} ${reason}: ${messages.join(' | ')}`,
      );
    });
  }

  it('refuses credentials in the forward URL (they would never be sent) without quoting them', async () => {
    const messages = await refusals({ SIDECAR_POSTBACK_FORWARD_URL: 'http://app:hunter2@127.0.0.1:3000/postbacks' });
    assert.ok(
      messages.some((m) => m.startsWith('SIDECAR_POSTBACK_FORWARD_URL') && /credentials/.test(m)),
      messages.join(' | '),
    );
    assert.ok(!messages.join('\n').includes('hunter2'), 'the password is not quoted');
  });

  it('refuses a key file without an RSA public key of at least 2048 bits, naming the key', async () => {
    const cases: Array<[string, RegExp]> = [
      [await file('empty.pem', 'nothing here'), /holds no PEM public key/],
      [await file('private.pem', keys.privateKeyPem), /holds a private key/],
      [await file('small.pem', `${gateway.publicKeyPem}${small.publicKeyPem}`), /key 2 of 2: key is 1024 bits/],
    ];
    for (const [path, reason] of cases) {
      const messages = await refusals({ SIDECAR_POSTBACK_PUBLIC_KEY_FILE: path });
      assert.ok(
        messages.some((m) => m.startsWith('SIDECAR_POSTBACK_PUBLIC_KEY_FILE') && reason.test(m)),
        messages.join(' | '),
      );
      assert.ok(!messages.join('\n').includes('BEGIN'), 'never quotes the file');
    }
  });

  it('reads the settings from the config file too, key file relative to it', async () => {
    await writeFile(join(dir, 'gw.pem'), gateway.publicKeyPem);
    const configFile = await file(
      'sidecar.json',
      JSON.stringify({
        postback: {
          forwardUrl: 'http://127.0.0.1:3000/p',
          publicUrl: 'https://pay.example.com/p',
          publicKeyFile: 'gw.pem',
          listen: { port: 9000 },
          maxAgeSeconds: 120,
        },
      }),
    );
    const postback = loadConfig({
      ...env,
      SIDECAR_CONFIG_FILE: configFile,
      SIDECAR_POSTBACK_FORWARD_URL: undefined,
      SIDECAR_POSTBACK_PUBLIC_URL: undefined,
      SIDECAR_POSTBACK_PUBLIC_KEY_FILE: undefined,
    }).postback!;
    assert.equal(postback.listen.port, 9000);
    assert.equal(postback.maxAgeSeconds, 120);
    assert.equal(postback.publicKeyFile, join(dir, 'gw.pem'));
  });
  it('delivers directly by default, with the queued delivery settings at their defaults', () => {
    const postback = loadConfig(env).postback!;
    assert.equal(postback.delivery, 'direct');
    assert.equal(postback.deliveryConcurrency, 4);
    assert.equal(postback.visibilityTimeoutMs, 60_000);
    const total = postback.retryScheduleMs.reduce((a, b) => a + b, 0);
    assert.ok(total > 2.9 * 86_400_000 && total < 3.1 * 86_400_000, `about three days: ${total} ms`);
    assert.equal(postback.retryScheduleMs[0], 0);
  });

  it('parses the retry schedule with its units and refuses a delay without one', async () => {
    const postback = loadConfig({ ...env, SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s, 200ms,1.5s,2m,1h,1d' }).postback!;
    assert.deepEqual(postback.retryScheduleMs, [0, 200, 1_500, 120_000, 3_600_000, 86_400_000]);
    const reasons = await refusals({ SIDECAR_POSTBACK_RETRY_SCHEDULE: '0s,5,5x' });
    assert.ok(
      reasons.some((r) => r.includes('SIDECAR_POSTBACK_RETRY_SCHEDULE') && r.includes('"5"')),
      reasons.join(),
    );
  });

  describe('the forward secret (Standard Webhooks)', () => {
    it('reads whsec_ and the base64 of 24 to 64 bytes, the newline around it ignored', async () => {
      const postback = loadConfig(env).postback!;
      assert.equal(postback.forwardSecret?.symmetricKeySize, 32);
      assert.ok(postback.forwardSecret.equals(createSecretKey(Buffer.from(forwardSecret.slice(6), 'base64'))));
      for (const bytes of [24, 64]) {
        const path = await file(`secret-${bytes}`, ` whsec_${randomBytes(bytes).toString('base64')}\r\n`);
        const config = loadConfig({ ...env, SIDECAR_POSTBACK_FORWARD_SECRET_FILE: path });
        assert.equal(config.postback?.forwardSecret?.symmetricKeySize, bytes);
      }
    });

    it('is required in production: one refusal naming the setting and how to turn signing off', async () => {
      const messages = await refusals({ SIDECAR_POSTBACK_FORWARD_SECRET_FILE: undefined });
      assert.deepEqual(messages.length, 1, messages.join(' | '));
      assert.match(
        messages[0]!,
        /^SIDECAR_POSTBACK_FORWARD_SECRET_FILE \(postback\.forwardSecretFile\): is required in production/,
      );
      assert.match(messages[0]!, /SIDECAR_POSTBACK_FORWARD_SIGNING \(postback\.forwardSigning\)=off/);
    });

    it('optional in staging: unsigned without the file, signed with it', () => {
      const staging = { ...env, SIDECAR_ENVIRONMENT: 'staging' };
      const without = loadConfig({ ...staging, SIDECAR_POSTBACK_FORWARD_SECRET_FILE: undefined });
      assert.equal(without.postback?.forwardSecret, undefined);
      assert.deepEqual(without.warnings, [], 'staging without the file: not warned');
      assert.equal(loadConfig(staging).postback?.forwardSecret?.symmetricKeySize, 32);
    });

    it('off: production starts unsigned with a loud warning; off with a file set is refused', async () => {
      const off = loadConfig({
        ...env,
        SIDECAR_POSTBACK_FORWARD_SECRET_FILE: undefined,
        SIDECAR_POSTBACK_FORWARD_SIGNING: 'off',
      });
      assert.equal(off.postback?.forwardSecret, undefined);
      const warning = off.warnings.find((w) => w.setting.startsWith('SIDECAR_POSTBACK_FORWARD_SIGNING'));
      assert.match(warning?.message ?? '', /UNSIGNED: anything that can reach it can forge a SUCCESS/);
      const messages = await refusals({ SIDECAR_POSTBACK_FORWARD_SIGNING: 'off' });
      assert.ok(
        messages.some((m) => m.startsWith('SIDECAR_POSTBACK_FORWARD_SIGNING') && /set only one/.test(m)),
        messages.join(' | '),
      );
      const typo = await refusals({ SIDECAR_POSTBACK_FORWARD_SIGNING: 'false' });
      assert.ok(
        typo.some((m) => m.startsWith('SIDECAR_POSTBACK_FORWARD_SIGNING')),
        typo.join(' | '),
      );
    });

    it('refuses a file that is not a whsec_ secret of 24 to 64 bytes, never quoting it', async () => {
      const short = randomBytes(16).toString('base64');
      const long = randomBytes(65).toString('base64');
      const raw = randomBytes(32).toString('base64');
      const cases: Array<[string, string, RegExp]> = [
        ['no-prefix', raw, /holds no Standard Webhooks secret: expected whsec_/],
        ['hex', `whsec_${randomBytes(32).toString('hex')}x`, /not standard base64/],
        ['url-safe', `whsec_${'Ab-_'.repeat(11)}`, /not standard base64/],
        ['two-lines', `whsec_${raw}\nwhsec_${raw}`, /not standard base64/],
        ['short', `whsec_${short}`, /decodes to 16 bytes; expected whsec_ followed by the base64 of 24 to 64/],
        ['long', `whsec_${long}`, /decodes to 65 bytes/],
        ['empty', '', /holds no Standard Webhooks secret/],
      ];
      for (const [name, text, reason] of cases) {
        const path = await file(`bad-secret-${name}`, text);
        const messages = await refusals({ SIDECAR_POSTBACK_FORWARD_SECRET_FILE: path });
        assert.equal(messages.length, 1, messages.join(' | '));
        assert.ok(messages[0]!.startsWith('SIDECAR_POSTBACK_FORWARD_SECRET_FILE'), messages[0]);
        assert.match(messages[0]!, reason, name);
        for (const part of [raw, short, long]) assert.ok(!messages[0]!.includes(part), `${name}: never quoted`);
      }
    });

    it('is read relative to the config file, like the other files', async () => {
      await writeFile(join(dir, 'relative-secret'), forwardSecret);
      const configFile = await file(
        'with-secret.json',
        JSON.stringify({ postback: { forwardSecretFile: 'relative-secret' } }),
      );
      const postback = loadConfig({
        ...env,
        SIDECAR_CONFIG_FILE: configFile,
        SIDECAR_POSTBACK_FORWARD_SECRET_FILE: undefined,
      }).postback!;
      assert.equal(postback.forwardSecretFile, join(dir, 'relative-secret'));
      assert.equal(postback.forwardSecret?.symmetricKeySize, 32);
    });
  });

  it('refuses queued delivery with the memory store, naming both settings', async () => {
    const reasons = await refusals({ SIDECAR_POSTBACK_DELIVERY: 'queued', SIDECAR_STATE_STORE: 'memory' });
    assert.ok(
      reasons.some((r) => r.includes('SIDECAR_POSTBACK_DELIVERY') && r.includes('SIDECAR_STATE_STORE')),
      reasons.join('\n'),
    );
    const queued = loadConfig({
      ...env,
      SIDECAR_POSTBACK_DELIVERY: 'queued',
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: 'redis://127.0.0.1:6379',
      SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true',
    }).postback!;
    assert.equal(queued.delivery, 'queued');
  });

  it('auto: queued in production with Redis, direct in staging or with the memory store', () => {
    // The records' MAC (docs/fleet.md) is not what this is about.
    const redis = {
      SIDECAR_STATE_STORE: 'redis',
      SIDECAR_REDIS_URL: 'rediss://redis.internal:6380',
      SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: 'true',
    };
    assert.equal(resolveDelivery('auto', { environment: 'production', stateStore: 'redis' }), 'queued');
    assert.equal(resolveDelivery('auto', { environment: 'staging', stateStore: 'redis' }), 'direct');
    assert.equal(resolveDelivery('auto', { environment: 'production', stateStore: 'memory' }), 'direct');
    assert.equal(resolveDelivery('direct', { environment: 'production', stateStore: 'redis' }), 'direct');
    const production = loadConfig({ ...env, ...redis, SIDECAR_ENVIRONMENT: 'production' }).postback!;
    assert.equal(production.delivery, 'queued', 'production with Redis');
    assert.equal(production.orderField, 'transaction_id');
    const staging = loadConfig({ ...env, ...redis, SIDECAR_ENVIRONMENT: 'staging' }).postback!;
    assert.equal(staging.delivery, 'direct', 'staging with Redis');
  });

  it('refuses a visibility timeout within the forward timeout, and an empty order field', async () => {
    const reasons = await refusals({
      SIDECAR_POSTBACK_FORWARD_TIMEOUT_MS: '10000',
      SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS: '10000',
      SIDECAR_POSTBACK_ORDER_FIELD: ' ',
    });
    assert.ok(
      reasons.some((r) => r.includes('SIDECAR_POSTBACK_VISIBILITY_TIMEOUT_MS') && r.includes('delivered twice')),
      reasons.join('\n'),
    );
    assert.ok(
      reasons.some((r) => r.includes('SIDECAR_POSTBACK_ORDER_FIELD')),
      reasons.join('\n'),
    );
  });
});
