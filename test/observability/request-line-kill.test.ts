// The request log line of an answered request survives a SIGKILL that comes right after the answer (an OOM kill,
// the end of Kubernetes' grace period): the line is on stdout before the client can even read its answer.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import { startSimulator } from '@signing-sidecar/simulator';
import { makeKeys } from '../support/keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from '../support/recording-gateway.js';
import { sidecarEnv } from '../support/sidecar.js';
import { spawnSidecar, type SpawnedSidecar } from '../support/spawned-sidecar.js';
import { depositJson } from '../support/payloads.js';

const DEPOSIT = depositJson({ amount: '5.00', invoice_no: `inv-kill-${Date.now()}` });

async function untilReady(sidecar: SpawnedSidecar, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await fetch(`${sidecar.adminUrl}/healthz/token`)).status !== 200) {
    if (Date.now() > deadline) assert.fail(`sidecar not ready within ${ms} ms:\n${sidecar.output().stdout}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function requestLines(stdout: string): Array<Record<string, unknown>> {
  return stdout
    .split('\n')
    .filter((line) => line.includes('"event":"request"'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('request log line and a hard kill', () => {
  it("a SIGKILL as soon as the client has its answer still leaves that request's line in the captured stdout", async () => {
    const keys = await makeKeys();
    const simulator = await startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
    });
    const sidecar = await spawnSidecar(await sidecarEnv(keys, simulator.baseUrl, { SIDECAR_LOG_LEVEL: 'info' }));
    try {
      await untilReady(sidecar, 10_000);
      // 'close' comes once stdout has been read to its end, which 'exit' does not promise.
      const closed = once(sidecar.child, 'close');
      const requestId = `kill-after-answer-${process.pid}`;
      const res = await fetch(`${sidecar.proxyUrl}/api/v2/transaction/init`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': requestId },
        body: DEPOSIT,
      });
      const body = await res.text();
      sidecar.child.kill('SIGKILL');
      await closed;
      assert.equal(res.status, 200, body);
      assert.equal((await sidecar.exited).signal, 'SIGKILL');
      const line = requestLines(sidecar.output().stdout).find((l) => l.requestId === requestId);
      assert.ok(line, `no request line for ${requestId} in:\n${sidecar.output().stdout}`);
      assert.deepEqual([line.msg, line.status, line.code], ['request answered', 200, 'ok']);
    } finally {
      await sidecar.kill();
      await simulator.close();
    }
  });
});
