// Issue 42: the egress listener holds at most its pool of large bodies at once (beyond 4 KiB each, which every body
// has free; the pool is the memory budget's egress share: 5.6 MiB in a 512 MiB budget, docs/operations.md "Memory"):
// 1,024 connections holding bodies near the 1 MiB limit could otherwise buffer 1 GiB and get the pod OOM-killed. Callers that trickle large bodies in fill the budget; the next large body is answered 503
// sidecar.body.budget_exhausted at once, unread and unsent; a payment of ordinary size still goes through; and once
// the large bodies are in and answered, the budget is whole again.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { depositJson } from '../support/payloads.js';
import type { RecordingGateway } from '../support/recording-gateway.js';
import { withReadySidecar } from '../support/sidecar.js';
import { waitFor } from '../support/wait-for.js';

const PATH = '/api/v2/transaction/init';
/** What docs/operations.md promises, written out: a test that read the constants could not catch a wrong one. */
const FREE_BYTES = 4 * 1024;
const MEMORY_LIMIT_MB = 512;
/** (512 MiB - 72 MiB runtime - 15 % headroom) x 25 % for bodies, halved between the listeners, over 8 bytes a byte. */
const POOL_BYTES = Math.floor((((512 - 72 - 512 * 0.15) * 0.25) / 2 / 8) * 1024 * 1024);
/** Near the default SIDECAR_MAX_BODY_BYTES (1 MiB): each takes almost 1 MiB of the pool. */
const LARGE_BYTES = 1_000_000;
/** How many large bodies the pool holds at once, and how many callers try: the rest must be refused. */
const FIT = Math.floor(POOL_BYTES / (LARGE_BYTES - FREE_BYTES));
const CALLERS = FIT + 4;

/** A deposit padded to exactly LARGE_BYTES of JSON, its invoice number `invoice`. */
function largeDeposit(invoice: string): string {
  const bare = depositJson({ invoice_no: invoice, pad: '' });
  return depositJson({ invoice_no: invoice, pad: 'x'.repeat(LARGE_BYTES - Buffer.byteLength(bare)) });
}

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: Record<string, unknown>;
}

/** The first answer in `raw` once it is complete (by its Content-Length), else undefined. */
function parseAnswer(raw: string): Answer | undefined {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine = '', ...lines] = raw.slice(0, end).split('\r\n');
  const headers = Object.fromEntries(
    lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
  );
  const body = raw.slice(end + 4, end + 4 + Number(headers['content-length']));
  if (Buffer.byteLength(body) < Number(headers['content-length'])) return undefined;
  return { status: Number(statusLine.split(' ')[1]), headers, body: JSON.parse(body) as Record<string, unknown> };
}

/** A caller that sends its headers and half of a large body, then waits before sending the rest. */
interface Trickler {
  readonly invoice: string;
  readonly socket: Socket;
  raw: string;
  /** Sends the rest of the body. */
  finish(): void;
}

function startTrickling(egressUrl: string, invoice: string): Trickler {
  const { hostname, port } = new URL(egressUrl);
  const body = Buffer.from(largeDeposit(invoice));
  const socket = connect(Number(port), hostname);
  const trickler: Trickler = { invoice, socket, raw: '', finish: () => socket.write(body.subarray(body.length / 2)) };
  socket.on('data', (chunk: Buffer) => (trickler.raw += chunk.toString('latin1')));
  socket.on('error', () => undefined);
  socket.write(
    `POST ${PATH} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
  );
  socket.write(body.subarray(0, body.length / 2));
  return trickler;
}

/** The invoice numbers of the payments the gateway received. */
function invoicesAtGateway(gateway: RecordingGateway): string[] {
  return gateway.requests.map((request) => {
    const { data } = JSON.parse(request.body) as { data: string };
    return (JSON.parse(Buffer.from(data, 'base64').toString('utf8')) as { invoice_no: string }).invoice_no;
  });
}

async function post(egressUrl: string, body: string): Promise<number> {
  const res = await fetch(`${egressUrl}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    signal: AbortSignal.timeout(20_000),
  });
  await res.arrayBuffer();
  return res.status;
}

describe('the egress body budget', () => {
  it('large bodies past the budget: 503 budget_exhausted, unread and unsent; small ones pass; then released', async () => {
    await withReadySidecar({ SIDECAR_MEMORY_LIMIT_MB: String(MEMORY_LIMIT_MB) }, async ({ gateway, running }) => {
      const { egressUrl } = running.sidecar;
      const callers = Array.from({ length: CALLERS }, (_, i) => startTrickling(egressUrl, `inv-large-${i}`));
      try {
        // The callers past the budget are answered while every caller is still sending: at once, not after a read.
        await waitFor(
          `${CALLERS - FIT} refusals`,
          () => callers.filter((c) => parseAnswer(c.raw) !== undefined).length >= CALLERS - FIT,
          10_000,
        );
        await new Promise((resolve) => setTimeout(resolve, 200));
        const refused = callers.filter((c) => parseAnswer(c.raw) !== undefined);
        assert.equal(refused.length, CALLERS - FIT, `${FIT} large bodies fit in the budget, no more`);
        for (const caller of refused) {
          const answer = parseAnswer(caller.raw)!;
          assert.equal(answer.status, 503);
          assert.equal(answer.body.code, 'sidecar.body.budget_exhausted');
          assert.equal(answer.body.retryable, true);
          assert.equal(answer.headers['retry-after'], '1');
        }
        assert.deepEqual(invoicesAtGateway(gateway), [], 'nothing reached the gateway');

        // A payment of ordinary size does not wait for the budget.
        assert.equal(await post(egressUrl, depositJson({ invoice_no: 'inv-small' })), 201);

        // The held bodies come in whole: they are sent and answered, and their share of the budget is given back.
        const held = callers.filter((c) => !refused.includes(c));
        for (const caller of held) caller.finish();
        await waitFor('the held bodies answered', () => held.every((c) => parseAnswer(c.raw) !== undefined), 20_000);
        assert.deepEqual(
          held.map((c) => parseAnswer(c.raw)?.status),
          held.map(() => 201),
        );
        const sent = invoicesAtGateway(gateway);
        assert.deepEqual(
          [...sent].sort(),
          ['inv-small', ...held.map((c) => c.invoice)].sort(),
          'the gateway got the small payment and the held ones, none of the refused',
        );

        // Released: as many large bodies as fit go through at once again.
        const later = await Promise.all(
          Array.from({ length: FIT }, (_, i) => post(egressUrl, largeDeposit(`inv-later-${i}`))),
        );
        assert.deepEqual(later, Array<number>(FIT).fill(201));
        const metrics = await running.sidecar.metrics.registry.getSingleMetricAsString(
          'signing_sidecar_requests_total',
        );
        assert.match(metrics, new RegExp(`code="sidecar\\.body\\.budget_exhausted"\\} ${CALLERS - FIT}\\n`));
      } finally {
        for (const caller of callers) caller.socket.destroy();
      }
    });
  });
});
