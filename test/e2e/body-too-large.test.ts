// A body over the limit gets its 413 even from a client that writes the whole body before it reads the answer, as
// Python's urllib does: the listener reads and drops the rest instead of closing on it (a reset would cost the
// client its answer). Both listeners, 100 tries at 2 MiB and at 8 MiB; and a client that never stops sending is cut.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { LINGER_BOUNDS } from '../../src/inbound/answer.js';
import { gatewayKeys, PATH, startBareReceiver, type BareReceiver } from '../postback/support.js';
import { makeKeys } from '../support/keys.js';
import { RecordingGateway } from '../support/recording-gateway.js';
import { sidecarEnv, startTestSidecar, type TestSidecar } from '../support/sidecar.js';

const TRIES = 100;
const MiB = 1024 * 1024;

/** Posts a JSON body of `bytes` `tries` times with urllib and counts the outcomes ("413 <code>" or the error). */
const URLLIB_CLIENT = `
import json, sys, urllib.error, urllib.request
url, size, tries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
body = b'{"pad":"' + b'x' * size + b'"}'
seen = {}
for _ in range(tries):
    request = urllib.request.Request(url, data=body, method='POST', headers={'Content-Type': 'application/json'})
    try:
        urllib.request.urlopen(request, timeout=20)
        key = 'answered without an error'
    except urllib.error.HTTPError as e:
        key = '%d %s' % (e.code, json.loads(e.read()).get('code', ''))
    except Exception as e:
        key = type(e).__name__
    seen[key] = seen.get(key, 0) + 1
print(json.dumps(seen))
`;

async function postWithUrllib(url: string, bytes: number): Promise<Record<string, number>> {
  const { stdout } = await promisify(execFile)('python3', ['-c', URLLIB_CLIENT, url, String(bytes), String(TRIES)], {
    timeout: 100_000,
  });
  return JSON.parse(stdout) as Record<string, number>;
}

/** A client that declares a huge body and writes as fast as it can; resolves once the listener cut it. */
function sendForever(url: string): Promise<{ answer: string; ms: number }> {
  const { hostname, port, pathname } = new URL(url);
  const socket = connect(Number(port), hostname);
  const started = Date.now();
  let answer = '';
  const chunk = Buffer.alloc(256 * 1024, 'x');
  const pump = () => {
    while (socket.writable && socket.write(chunk));
  };
  socket.on('connect', () => {
    socket.write(
      `POST ${pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${1024 * MiB}\r\n\r\n`,
    );
    pump();
  });
  socket.on('drain', pump);
  socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
  return new Promise((resolve) => {
    socket.on('error', () => undefined);
    socket.on('close', () => resolve({ answer, ms: Date.now() - started }));
  });
}

describe('the egress listener', () => {
  let gateway: RecordingGateway;
  let running: TestSidecar;
  let url: string;
  before(async () => {
    gateway = await new RecordingGateway().start();
    running = await startTestSidecar(await sidecarEnv(await makeKeys(), gateway.url));
    url = `${running.sidecar.egressUrl}/api/v2/transaction/init`;
  });
  after(async () => {
    await running.stop();
    await gateway.stop();
  });

  for (const size of [2 * MiB, 8 * MiB]) {
    test(`${size / MiB} MiB, written whole before reading: ${TRIES} of ${TRIES} get the 413`, async () => {
      assert.deepEqual(await postWithUrllib(url, size), { [`413 sidecar.body.too_large`]: TRIES });
      assert.equal(gateway.requests.length, 0, 'nothing reached the gateway');
    });
  }

  test('a client that never stops sending gets its 413 and is cut within the bounds', async () => {
    const { answer, ms } = await sendForever(url);
    assert.match(answer, /^HTTP\/1\.1 413 /);
    assert.ok(ms < LINGER_BOUNDS.ms + 3_000, `cut after ${ms} ms`);
  });
});

describe('the postback receiver', () => {
  let world: BareReceiver;
  before(async () => {
    world = await startBareReceiver(await gatewayKeys());
  });
  after(() => world.stop(100));

  for (const size of [2 * MiB, 8 * MiB]) {
    test(`${size / MiB} MiB, written whole before reading: ${TRIES} of ${TRIES} get the 413`, async () => {
      assert.deepEqual(await postWithUrllib(`${world.receiverUrl}${PATH}`, size), {
        [`413 postback.body.too_large`]: TRIES,
      });
    });
  }

  test('a sender that never stops sending gets its 413 and is cut within the bounds', async () => {
    const { answer, ms } = await sendForever(`${world.receiverUrl}${PATH}`);
    assert.match(answer, /^HTTP\/1\.1 413 /);
    assert.ok(ms < LINGER_BOUNDS.ms + 3_000, `cut after ${ms} ms`);
  });
});
