import assert from 'node:assert/strict';
import { request, type OutgoingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { depositJson } from '../support/payloads.js';
import { untilInFlight, withReadySidecar, type TestSidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const PATH = '/api/v2/transaction/init';

/** A raw client connection to the sidecar, collecting everything it receives until the sidecar closes it. */
function rawClient(proxyUrl: string): { socket: Socket; received: Promise<string> } {
  const { hostname, port } = new URL(proxyUrl);
  const socket = connect(Number(port), hostname);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const received = new Promise<string>((resolve) => {
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', () => undefined);
  });
  return { socket, received };
}

function requestLines(running: TestSidecar): Array<Record<string, unknown>> {
  return running.logs.lines().filter((line) => line.event === 'request');
}

describe('egress listener', () => {
  it('a caller that disconnects before its answer: the line says the answer was not delivered', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      gateway.holdUntil = Number.MAX_SAFE_INTEGER;
      const body = depositJson({ invoice_no: 'inv-gone' });
      const { socket } = rawClient(running.sidecar.egressUrl);
      socket.write(
        `POST ${PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      );
      await waitFor('the payment reaches the gateway', () => gateway.requests.length === 1, 3_000);
      socket.destroy();
      await new Promise((resolve) => setTimeout(resolve, 50));
      gateway.release();
      await waitFor('the request line', () => requestLines(running).length === 1, 3_000);
      const [line] = requestLines(running);
      assert.equal(line?.code, 'ok', 'the gateway accepted it: the payment may exist');
      assert.equal(line?.delivered, false);
      assert.equal(line?.attempts, 1);
    });
  });

  it('an answered caller: no delivered field in its line', async () => {
    await withReadySidecar({}, async ({ running }) => {
      const answer = await fetch(`${running.sidecar.egressUrl}${PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: depositJson(),
      });
      await answer.arrayBuffer();
      await waitFor('the request line', () => requestLines(running).length === 1, 3_000);
      assert.equal(Object.hasOwn(requestLines(running)[0] ?? {}, 'delivered'), false);
    });
  });

  it('shutdown while a body is still arriving: 503 retryable (nothing was sent), logged and counted', async () => {
    const env = { SIDECAR_SHUTDOWN_DRAIN_DELAY_MS: '0', SIDECAR_SHUTDOWN_MAX_DELAY_MS: '300' };
    await withReadySidecar(env, async ({ gateway, running }) => {
      const { socket, received } = rawClient(running.sidecar.egressUrl);
      socket.write(
        `POST ${PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"amount":`,
      );
      await untilInFlight(running, 1);
      await running.stop();
      const answer = await received;
      assert.match(answer, /^HTTP\/1\.1 503 /);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { code: string; retryable: boolean };
      assert.deepEqual([body.code, body.retryable], ['sidecar.shutdown.draining', true]);
      assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
      await waitFor('the request line', () => requestLines(running).length === 1, 3_000);
      const [line] = requestLines(running);
      assert.equal(line?.status, 503);
      assert.equal(line?.code, 'sidecar.shutdown.draining');
      assert.equal(line?.attempts, 0);
      assert.ok(running.logs.lines().some((l) => l.event === 'shutdown.done' && l.answeredNotSent === 1));
      const metrics = await running.sidecar.metrics.registry.metrics();
      assert.match(metrics, /signing_sidecar_requests_total\{[^}]*code="sidecar\.shutdown\.draining"[^}]*\} 1/);
    });
  });

  it('a caller that never finishes its headers is cut off after 10 s with 408', { timeout: 30_000 }, async () => {
    await withReadySidecar({}, async ({ running }) => {
      const { socket, received } = rawClient(running.sidecar.egressUrl);
      const started = Date.now();
      socket.write(`POST ${PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n`);
      const answer = await received;
      assert.match(answer, /^HTTP\/1\.1 408 /);
      assert.ok(Date.now() - started >= 9_000, 'not before the headers timeout');
    });
  });
});

/** A POST to the sidecar with exactly these headers (Host included), as node:http writes them. */
function post(
  proxyUrl: string,
  headers: OutgoingHttpHeaders,
): Promise<{ status: number; code: string | undefined; retryable: boolean | undefined }> {
  const { hostname, port } = new URL(proxyUrl);
  const body = depositJson();
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, path: PATH, method: 'POST', setHost: false, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const parsed = JSON.parse(text) as { code?: string; retryable?: boolean };
        resolve({ status: res.statusCode ?? 0, code: parsed.code, retryable: parsed.retryable });
      });
    });
    req.on('error', reject);
    for (const [name, value] of Object.entries({ 'content-type': 'application/json', ...headers }))
      if (value !== undefined) req.setHeader(name, value);
    req.end(body);
  });
}

async function refusedCount(running: TestSidecar, code: string): Promise<number> {
  const metrics = await running.sidecar.metrics.registry.getSingleMetric('signing_sidecar_requests_total')?.get();
  return (metrics?.values ?? [])
    .filter((value) => value.labels.code === code)
    .reduce((sum, value) => sum + value.value, 0);
}

// DNS rebinding and browsers: a page the developer visits can point its own name at 127.0.0.1 and post
// to the sidecar from there; nothing of such a request may reach the gateway.
describe('egress listener: only callers that address the sidecar by name, never a browser', () => {
  it('a rebinding page (Host attacker.example, Origin, Sec-Fetch-Site): 421 forbidden_host, nothing sent', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const grants = gateway.grants.length;
      const { port } = new URL(running.sidecar.egressUrl);
      const answer = await post(running.sidecar.egressUrl, {
        host: `attacker.example:${port}`,
        origin: `http://attacker.example:${port}`,
        'sec-fetch-site': 'cross-site',
      });
      assert.deepEqual(answer, { status: 421, code: 'sidecar.request.forbidden_host', retryable: true });
      const plain = await post(running.sidecar.egressUrl, { host: 'attacker.example' });
      assert.equal(plain.code, 'sidecar.request.forbidden_host');
      assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
      assert.equal(gateway.grants.length, grants, 'no token was asked for');
      await waitFor('the request lines', () => requestLines(running).length === 2, 3_000);
      for (const line of requestLines(running)) {
        assert.deepEqual([line.status, line.code, line.attempts], [421, 'sidecar.request.forbidden_host', 0]);
      }
      assert.equal(await refusedCount(running, 'sidecar.request.forbidden_host'), 2);
    });
  });

  it('refused before the body is read: the answer comes while the body is still arriving', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const { socket } = rawClient(running.sidecar.egressUrl);
      const head = new Promise<string>((resolve, reject) => {
        setTimeout(() => reject(new Error('no answer while the body was arriving')), 5_000).unref();
        let text = '';
        socket.on('data', (chunk: Buffer) => {
          text += chunk.toString('utf8');
          if (text.includes('}')) resolve(text);
        });
      });
      socket.write(
        `POST ${PATH} HTTP/1.1\r\nHost: attacker.example\r\nContent-Type: application/json\r\n` +
          'Content-Length: 100000\r\n\r\n{"amount":',
      );
      const answer = await head;
      socket.destroy();
      assert.match(answer, /^HTTP\/1\.1 421 /);
      assert.match(answer, /"code":"sidecar\.request\.forbidden_host"/);
      assert.equal(gateway.requests.length, 0);
    });
  });

  it('Host as local callers write it: 127.0.0.1, localhost or [::1], with or without port, is signed and sent', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const { port } = new URL(running.sidecar.egressUrl);
      const hosts = [`127.0.0.1:${port}`, '127.0.0.1', `localhost:${port}`, 'localhost', `[::1]:${port}`, '[::1]'];
      for (const host of hosts) {
        const answer = await post(running.sidecar.egressUrl, { host });
        assert.equal(answer.status, 201, `${host}: ${answer.code}`);
      }
      assert.equal(gateway.requests.length, hosts.length);
    });
  });

  it('a browser request (Origin, or Sec-Fetch-Site but none): 403 browser_origin, nothing sent', async () => {
    await withReadySidecar({}, async ({ gateway, running }) => {
      const host = new URL(running.sidecar.egressUrl).host;
      const browserMade: OutgoingHttpHeaders[] = [
        { host, origin: 'http://evil.example' },
        { host, origin: `http://${host}` },
        { host, 'sec-fetch-site': 'cross-site' },
        { host, 'sec-fetch-site': 'same-site' },
        { host, 'sec-fetch-site': 'same-origin' },
      ];
      for (const headers of browserMade) {
        const answer = await post(running.sidecar.egressUrl, headers);
        assert.deepEqual(answer, { status: 403, code: 'sidecar.request.browser_origin', retryable: true });
      }
      assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
      assert.equal(await refusedCount(running, 'sidecar.request.browser_origin'), browserMade.length);
      // No page made it (typed, bookmarked), and Node's fetch() marks every request Sec-Fetch-Mode: cors.
      for (const headers of [
        { host, 'sec-fetch-site': 'none' },
        { host, 'sec-fetch-mode': 'cors' },
      ]) {
        assert.equal((await post(running.sidecar.egressUrl, headers)).status, 201);
      }
      assert.equal(gateway.requests.length, 2);
    });
  });
});
