// The PKCS#11 calls that wait on the token run on its own thread (src/signing/pkcs11-thread.ts): on a module whose
// C_Initialize, C_Login and C_SignInit each take a round trip (slow-pkcs11.c over SoftHSM2, built here with the C
// compiler pkcs11js needs anyway), signatures and a reopen after an outage never hold the event loop.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { constants, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Pkcs11SignerConfig } from '../../src/config/signer-settings.js';
import { Secret } from '../../src/config/secret.js';
import { loadPkcs11Binding } from '../../src/signing/pkcs11-binding.js';
import { startPkcs11Signer, type Pkcs11Signer } from '../../src/signing/pkcs11-signer.js';
import { scratchDir } from '../support/scratch.js';
import {
  initToken,
  newSoftHsm,
  pkcs11SkipReason,
  pkcs11ToolKeyPair,
  removeTokens,
  type SoftHsm,
} from '../support/softhsm.js';

const TOKEN = { label: 'slow-token', pin: '192837' };
/** What each slow call waits: a round trip to a device some way off. */
const ROUND_TRIP_MS = 150;
/** Far below a round trip: a call on the event loop would hold it for one whole. */
const MAX_STALL_MS = 50;

const skip = pkcs11SkipReason();
let hsm: SoftHsm;
let slowModule: string;

before(() => {
  if (skip !== undefined) return;
  hsm = newSoftHsm();
  process.env.SOFTHSM2_CONF = hsm.env.SOFTHSM2_CONF;
  initToken(hsm, TOKEN.label, TOKEN.pin);
  pkcs11ToolKeyPair(hsm, TOKEN, { label: 'payments', id: 'a1', bits: 2048 });
  slowModule = join(scratchDir('slow-pkcs11-'), 'slow-pkcs11.so');
  const source = fileURLToPath(new URL('slow-pkcs11.c', import.meta.url));
  const headers = fileURLToPath(new URL('../../node_modules/pkcs11js/includes/pkcs11', import.meta.url));
  execFileSync('cc', ['-shared', '-fPIC', '-O2', '-I', headers, '-o', slowModule, source, '-ldl']);
  process.env.SLOW_PKCS11_TARGET = hsm.module;
});
after(() => {
  delete process.env.SLOW_PKCS11_DELAY_MS;
});

/** A signer on the slow module, opened at once (start is not what is measured), stopped when the test ends. */
function slowSigner(events: Partial<Parameters<typeof startPkcs11Signer>[1]> = {}): Pkcs11Signer {
  const dir = scratchDir('slow-pin-');
  const pinFile = join(dir, 'pin');
  writeFileSync(pinFile, `${TOKEN.pin}\n`, { mode: 0o600 });
  const config: Pkcs11SignerConfig = {
    kind: 'pkcs11',
    module: slowModule,
    token: { label: TOKEN.label },
    key: { label: 'payments', id: undefined },
    pin: new Secret(TOKEN.pin),
    pinFile,
    sessions: 4,
    publicKey: undefined,
  };
  const ignore = () => undefined;
  process.env.SLOW_PKCS11_DELAY_MS = '0';
  const signer = startPkcs11Signer(
    config,
    { onDown: ignore, onReopenFailed: ignore, onUp: ignore, ...events },
    loadPkcs11Binding(),
  );
  process.env.SLOW_PKCS11_DELAY_MS = String(ROUND_TRIP_MS);
  return signer;
}

/** The event loop's longest stall while `work` runs, in ms. */
async function longestStall(work: () => Promise<void>): Promise<number> {
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  try {
    await work();
  } finally {
    delay.disable();
  }
  return delay.max / 1e6;
}

const verifies = (signer: Pkcs11Signer, text: string, signature: string): boolean =>
  verify(
    'sha256',
    Buffer.from(text),
    { key: signer.key.publicKey, padding: constants.RSA_PKCS1_PADDING },
    Buffer.from(signature, 'base64'),
  );

describe('a token a round trip away (C_Initialize, C_Login, C_SignInit each waiting)', { skip }, () => {
  it(`8 signatures at once: each C_SignInit waits ${ROUND_TRIP_MS} ms, the event loop never ${MAX_STALL_MS} ms`, async () => {
    const signer = slowSigner();
    try {
      const texts = Array.from({ length: 8 }, (_, n) => `POST.https://gw.example/api/v2/transaction/init.${n}`);
      let signatures: string[] = [];
      const started = performance.now();
      const stall = await longestStall(async () => {
        signatures = await Promise.all(texts.map((text) => signer.sign(text)));
      });
      const elapsed = performance.now() - started;
      assert.ok(elapsed >= ROUND_TRIP_MS, `the module did wait (${elapsed.toFixed(0)} ms)`);
      assert.ok(
        texts.every((text, n) => verifies(signer, text, signatures[n] ?? '')),
        'every signature verifies',
      );
      assert.ok(stall < MAX_STALL_MS, `event loop held ${stall.toFixed(1)} ms`);
    } finally {
      signer.stop();
    }
  });

  it(`the token taken away and back: the reopen's C_Initialize and C_Login wait, the event loop does not`, async () => {
    let up = 0;
    const failures: string[] = [];
    const signer = slowSigner({ onUp: () => up++, onReopenFailed: (reason) => failures.push(reason) });
    try {
      assert.ok(verifies(signer, 'before', await signer.sign('before')));
      const stall = await longestStall(async () => {
        const restore = removeTokens(hsm);
        // Signatures fail once the token is gone; the signer goes down and tries to open it again, with backoff.
        for (let n = 0; signer.available() && n < 200; n++) await signer.sign(`during ${n}`).catch(() => undefined);
        assert.equal(signer.available(), false, 'down once the token is gone');
        for (let n = 0; failures.length === 0 && n < 200; n++) await sleep(50);
        assert.ok(failures.length > 0, 'a reopen was tried while the token was away');
        restore();
        for (let n = 0; !signer.available() && n < 400; n++) await sleep(50);
      });
      assert.equal(signer.available(), true, 'open again once the token is back');
      assert.equal(up, 1);
      assert.ok(verifies(signer, 'after', await signer.sign('after')), 'signs with the reopened token');
      assert.ok(stall < MAX_STALL_MS, `event loop held ${stall.toFixed(1)} ms`);
    } finally {
      signer.stop();
    }
  });
});
