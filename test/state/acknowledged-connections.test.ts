// Acknowledged writes on connections of their own: a WAIT that a slow replica holds up delays neither the store's
// other commands nor another caller's acknowledged write. A primary and one replica, real redis-server processes on
// 127.0.0.1; the replica is frozen (SIGSTOP), so every WAIT for it runs to its own timeout.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ACKNOWLEDGED_WRITE_CONNECTIONS } from '../../src/state/link-pool.js';
import { createRedisLink, type RedisLink } from '../../src/state/redis-client.js';
import { accountTag } from '../../src/state/redis-keys.js';
import { RedisStateStore } from '../../src/state/redis-store.js';
import { StateStoreUnavailableError } from '../../src/state/state-store.js';
import { startRedis, startReplica, type TestRedis } from '../support/redis-server.js';

// WAIT's own timeout is half of it: a second, long beside a command on 127.0.0.1 even on a loaded machine.
const COMMAND_TIMEOUT_MS = 2_000;
const WAIT_MS = COMMAND_TIMEOUT_MS / 2;
const TTL_MS = 60_000;

let primary: TestRedis;
let replica: TestRedis;

before(async () => {
  primary = await startRedis();
  replica = await startReplica(primary);
});
after(async () => {
  replica.thaw();
  await Promise.all([replica.close(), primary.close()]);
});

async function openStore(minReplicasAcked: number, url = primary.url): Promise<RedisStateStore> {
  const links: RedisLink[] = [];
  const store = new RedisStateStore({
    topology: { mode: 'standalone', url },
    accountTag: accountTag('https://gateway.test', 'merchant@example.test'),
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    minReplicasAcked,
    createLink: (options) => {
      const link = createRedisLink(options);
      links.push(link);
      return link;
    },
  });
  assert.equal(await store.whenAvailable(5_000), true, 'the store connects');
  // Available once one acknowledging connection is up; what follows counts on every one of them.
  const deadline = Date.now() + 5_000;
  while (!links.every((link) => link.isReady)) {
    if (Date.now() > deadline) throw new Error('a connection of the store never came up');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return store;
}

/** How long `promise` took to settle, and whether it was rejected with the store's unavailable error. */
async function timed(promise: Promise<unknown>): Promise<{ ms: number; unavailable: boolean }> {
  const started = performance.now();
  const unavailable = await promise.then(
    () => false,
    (err: unknown) => err instanceof StateStoreUnavailableError,
  );
  return { ms: performance.now() - started, unavailable };
}

/** Until the primary shows a client blocked in WAIT (so what follows is sent while it is). */
async function waitIsBlocking(): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!(await primary.cli('CLIENT', 'LIST')).some((line) => / cmd=wait\b/.test(line) && / flags=b\b/.test(line))) {
    if (Date.now() > deadline) throw new Error('no WAIT was seen blocking on the primary');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const unique = () => `ack-test:${Math.random().toString(36).slice(2)}`;

/** The command names in a chunk a client sent (RESP arrays of bulk strings; the tests' values hold no CRLF). */
const commandNames = (text: string): string[] =>
  [...text.matchAll(/\*\d+\r\n\$\d+\r\n([A-Za-z]+)\r\n/g)].map((match) => (match[1] ?? '').toUpperCase());

/**
 * A relay to the primary that records the commands each connection sends, in order, and that, once told a key, holds
 * back Redis' replies on each connection that sent a command naming it until that connection has sent a WAIT too.
 * A write whose WAIT is sent only after the write's reply never gets that reply: only one sent with its WAIT, in one
 * round trip, goes through.
 */
async function startRelay(): Promise<{
  url: string;
  readonly connections: string[][];
  holdFor(key: string): void;
  close(): Promise<void>;
}> {
  let key: string | undefined;
  const connections: string[][] = [];
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const redis = connect(primary.port, '127.0.0.1');
    for (const socket of [client, redis]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.once('close', () => (client.destroy(), redis.destroy()));
    }
    const sent: string[] = [];
    connections.push(sent);
    let held: Buffer[] | undefined;
    client.on('data', (chunk) => {
      const text = chunk.toString('latin1');
      sent.push(...commandNames(text));
      if (key !== undefined && text.includes(key)) held ??= [];
      if (held !== undefined && text.includes('\r\nWAIT\r\n')) {
        for (const reply of held) client.write(reply);
        held = undefined;
      }
      redis.write(chunk);
    });
    redis.on('data', (chunk) => (held === undefined ? client.write(chunk) : held.push(chunk)));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `redis://127.0.0.1:${port}`,
    connections,
    holdFor: (name) => (key = name),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('acknowledged writes on connections of their own', () => {
  it('a WAIT held up by a frozen replica delays neither reads, plain writes nor refused acknowledged writes', async () => {
    const store = await openStore(1);
    const held = unique();
    assert.equal(await store.setIfAbsent(held, 'first', TTL_MS, { acknowledged: true }), true);
    replica.freeze();
    try {
      const stuck = timed(store.compareAndSet(unique(), undefined, 'v', TTL_MS, { acknowledged: true }));
      await waitIsBlocking();
      const read = await timed(store.get(held));
      const plainWrite = await timed(store.compareAndSet(unique(), undefined, 'v', TTL_MS));
      // Acknowledged, but refused (the key is held): nothing written, so its WAIT is not waited for.
      const refused = await timed(store.setIfAbsent(held, 'second', TTL_MS, { acknowledged: true }));
      for (const [what, { ms, unavailable }] of Object.entries({ read, plainWrite, refused })) {
        assert.equal(unavailable, false, `${what} answered`);
        assert.ok(ms < WAIT_MS / 2, `${what} took ${ms.toFixed(0)} ms while a WAIT of ${WAIT_MS} ms was blocked`);
      }
      const blocked = await stuck;
      assert.equal(blocked.unavailable, true, 'the write the replica never acknowledged is refused');
      assert.ok(blocked.ms >= WAIT_MS * 0.9, `it waited for the replica (${blocked.ms.toFixed(0)} ms)`);
      assert.equal(store.isAvailable(), true, 'slow replicas are no outage of the store');
    } finally {
      replica.thaw();
      await store.close();
    }
  });

  it('acknowledged writes of different callers wait for the replica side by side, not one after the other', async () => {
    const store = await openStore(1);
    replica.freeze();
    try {
      const writes = Array.from({ length: ACKNOWLEDGED_WRITE_CONNECTIONS }, () =>
        timed(store.writeIf([], [{ key: unique(), value: 'v', ttlMs: TTL_MS }], { acknowledged: true })),
      );
      const settled = await Promise.all(writes);
      for (const { ms, unavailable } of settled) {
        assert.equal(unavailable, true, 'refused: the replica acknowledged nothing');
        // One after the other, the second would end at twice WAIT's timeout, past the command timeout.
        assert.ok(ms < WAIT_MS * 1.6, `each took about one WAIT: ${settled.map((s) => s.ms.toFixed(0)).join(', ')}`);
      }
    } finally {
      replica.thaw();
      await store.close();
    }
  });

  it('a write and its WAIT take one round trip: the WAIT leaves before the write is answered', async () => {
    const relay = await startRelay();
    const store = await openStore(1, relay.url);
    try {
      const write = (key: string) =>
        store.writeIf([{ key, holds: undefined }], [{ key, value: 'v', ttlMs: TTL_MS }], { acknowledged: true });
      // Writes one at a time go on the first link. Its first runs the script there, unpipelined (a NOSCRIPT would
      // put the EVAL behind the WAIT).
      assert.equal(await write(unique()), true);
      const key = unique();
      relay.holdFor(key);
      assert.equal(await write(key), true, 'acknowledged, its reply held back until its WAIT was sent');
    } finally {
      await store.close();
      await relay.close();
    }
  });

  it('a script sent again after a SCRIPT FLUSH gets a WAIT of its own: the one queued before it cannot count it', async () => {
    const relay = await startRelay();
    const store = await openStore(1, relay.url);
    const write = (key: string) =>
      store.writeIf([{ key, holds: undefined }], [{ key, value: 'v', ttlMs: TTL_MS }], { acknowledged: true });
    try {
      assert.equal(await write(unique()), true);
      await primary.cli('SCRIPT', 'FLUSH');
      assert.equal(await write(unique()), true);
      // The WAIT queued behind the EVALSHA (refused NOSCRIPT) went before the EVAL that wrote.
      const lastSent = relay.connections.map((sent) => sent.slice(-4).join(' '));
      assert.ok(lastSent.includes('EVALSHA WAIT EVAL WAIT'), `each connection's last commands: ${lastSent.join('; ')}`);
    } finally {
      await store.close();
      await relay.close();
    }
  });

  it(`opens ${ACKNOWLEDGED_WRITE_CONNECTIONS} more connections only when writes wait for replicas`, async () => {
    const clients = async () => (await primary.cli('CLIENT', 'LIST')).filter((line) => line.includes(' cmd=')).length;
    const baseline = await clients();
    const plain = await openStore(0);
    const plainCount = (await clients()) - baseline;
    await plain.close();
    const deadline = Date.now() + 5_000;
    while ((await clients()) > baseline && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 20));
    const acked = await openStore(1);
    try {
      while ((await clients()) - baseline < plainCount + ACKNOWLEDGED_WRITE_CONNECTIONS && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(plainCount, 2, 'commands and pub/sub');
      assert.equal((await clients()) - baseline, 2 + ACKNOWLEDGED_WRITE_CONNECTIONS);
    } finally {
      await acked.close();
    }
  });
});
