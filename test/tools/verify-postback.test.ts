import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createVerify } from '../../src/cli/verify.js';
import { parsePrivateKey } from '../../src/config/private-key.js';
import { newNonce } from '../../src/signing/nonce.js';
import { createSigner } from '../../src/signing/signer.js';
import { signingString, unixTimestamp } from '../../src/signing/signing-string.js';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { vectorPrivateKeyPem, vectorPublicKeyPem } from '../support/vectors.js';
import { runCommand, stdinOf, tempDir } from './run-command.js';

const USERNAME = 'vendor@example.com';
const PASSWORD = 'pw-for-postback-test';

/** The request exactly as a vendor's webhook sees it, written as raw HTTP text (the verify capture format). */
async function rawRequest(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const headerLines: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) headerLines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
  return `${req.method} ${req.url} HTTP/1.1\r\n${headerLines.join('\r\n')}\r\n\r\n${Buffer.concat(chunks).toString('utf8')}`;
}

describe('verify a signed postback delivered by the simulator', () => {
  let sim: RunningSimulator;
  let webhook: Server;
  let received: Promise<string>;
  let cleanup: () => Promise<void>;
  let gatewayKeyFile: string;

  before(async () => {
    let deliver: (raw: string) => void = () => {};
    received = new Promise((resolve) => (deliver = resolve));
    webhook = createServer((req, res) => {
      void rawRequest(req).then((raw) => {
        deliver(raw);
        res.end('ok');
      });
    });
    await new Promise<void>((resolve) => webhook.listen(0, '127.0.0.1', resolve));
    const webhookUrl = `http://127.0.0.1:${(webhook.address() as AddressInfo).port}/hooks/payments`;
    sim = await startSimulator({
      accounts: [
        { username: USERNAME, password: PASSWORD, publicKeyPem: vectorPublicKeyPem, webhookUrl, signedPostbacks: true },
      ],
    });
    const tmp = await tempDir();
    cleanup = tmp.cleanup;
    gatewayKeyFile = join(tmp.dir, 'gateway-pub.pem');
    await writeFile(gatewayKeyFile, sim.postbackPublicKeyPem);
  });
  after(async () => {
    await sim.close();
    webhook.closeAllConnections();
    await new Promise<void>((resolve) => webhook.close(() => resolve()));
    await cleanup();
  });

  async function createDeposit(): Promise<string> {
    const login = await fetch(`${sim.baseUrl}/api/v2/auth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant_type: 'password', username: USERNAME, password: PASSWORD }),
    });
    const { access_token: token } = (await login.json()) as { access_token: string };
    const data = Buffer.from(
      JSON.stringify({ amount: '10.00', currency: 'USD', user_id: 'u1', invoice_no: 'inv-pb' }),
    ).toString('base64');
    const url = `${sim.baseUrl}/api/v2/transaction/init`;
    const timestamp = unixTimestamp(Date.now());
    const nonce = newNonce();
    const signature = await createSigner(parsePrivateKey(vectorPrivateKeyPem)).sign(
      signingString({ method: 'POST', fullUrl: url, timestamp, nonce, data }),
    );
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
        'x-timestamp': timestamp,
        'x-nonce': nonce,
        'x-signature': signature,
      },
      body: JSON.stringify({ data }),
    });
    const body = (await res.json()) as { transaction_id: string };
    assert.ok(res.ok, JSON.stringify(body));
    return body.transaction_id;
  }

  it('the captured postback verifies against the gateway key; an altered copy does not', async () => {
    const id = await createDeposit();
    await sim.complete(id, 'SUCCESS');
    const capture = await received;
    const ok = await runCommand(createVerify(stdinOf(capture)), ['--public-key', gatewayKeyFile, '--scheme', 'http']);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    assert.match(
      ok.stdout,
      /signing string \(rebuilt by spec 5\.2\):\nPOST\.http:\/\/127\.0\.0\.1:\d+\/hooks\/payments\.\d+\./,
    );
    assert.match(ok.stdout, /result: signature VERIFIES/);

    const data = /"data":"([^"]+)"/.exec(capture)![1]!;
    const payload = Buffer.from(data, 'base64').toString('utf8').replace('SUCCESS', 'FAILED');
    const altered = capture.replace(data, Buffer.from(payload).toString('base64'));
    const bad = await runCommand(createVerify(stdinOf(altered)), ['--public-key', gatewayKeyFile, '--scheme', 'http']);
    assert.equal(bad.code, 1);
    assert.match(bad.stdout, /signature does not match this public key/);
  });
});
