import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { maskSecrets, Secret } from '../../src/config/secret.js';

describe('maskSecrets: what a gateway echoed, with the secrets the request carried masked', () => {
  const password = new Secret('p"a/ss\\wörd 1&2');

  it('masks a secret as itself, as JSON text escapes it and percent-encoded', () => {
    const echoes = [
      `bad password ${password.reveal()}`,
      `you sent ${JSON.stringify({ password: password.reveal() })}`,
      `you sent password=${encodeURIComponent(password.reveal())}&grant_type=password`,
    ];
    assert.deepEqual(
      echoes.map((text) => maskSecrets(text, [password])),
      [
        'bad password [redacted]',
        'you sent {"password":"[redacted]"}',
        'you sent password=[redacted]&grant_type=password',
      ],
    );
  });

  it('masks every secret given, every occurrence, and leaves other text as it is', () => {
    const token = new Secret('rt-123');
    assert.equal(
      maskSecrets('rt-123 then rt-123 and FAILED', [password, token, new Secret('')]),
      '[redacted] then [redacted] and FAILED',
    );
  });
});
