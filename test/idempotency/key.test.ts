import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { SidecarError } from '../../src/errors.js';
import { idempotencyKey } from '../../src/idempotency/key.js';

const refused = (header: string | string[]) =>
  assert.throws(
    () => idempotencyKey(header),
    (err: unknown) =>
      err instanceof SidecarError && err.code === 'sidecar.idempotency.key_invalid' && err.status === 400,
    JSON.stringify(header),
  );

describe('Idempotency-Key: 1 to 255 visible ASCII characters', () => {
  it('no header: no key', () => {
    assert.equal(idempotencyKey(undefined), undefined);
  });

  it('accepts UUIDs, quoted draft-style keys and every visible ASCII character, up to 255', () => {
    const visible = Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i)).join('');
    for (const key of ['8e03978e-40d5-43e8-bc93-6894a57f9324', '"8e03978e"', 'x', visible, 'k'.repeat(255)]) {
      assert.ok(idempotencyKey(key), key);
    }
  });

  it('refuses empty, too long, spaces, tabs, control and non-ASCII characters', () => {
    for (const key of ['', 'k'.repeat(256), 'a b', 'a\tb', 'a\u0000b', 'a\u007fb', 'caf\u00e9', ' key', 'key ']) {
      refused(key);
    }
  });

  it('refuses repeated headers (Node joins them with ", "): one request, one key', () => {
    refused('first, second');
    refused(['first', 'second']);
  });

  it('is known by its SHA-256 only: the digest, never the key', () => {
    const key = 'order-4711-attempt';
    const parsed = idempotencyKey(key);
    assert.deepEqual(parsed, { sha256: createHash('sha256').update(key).digest('hex') });
    assert.equal(JSON.stringify(parsed).includes(key), false);
  });
});
