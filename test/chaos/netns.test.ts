// The namespace network the fault campaign cuts links in (test/support/netns.ts): two parties, a TCP server in one
// and a client in the other, each in its own namespace as the campaign runs Redis and the sidecars. A cut must
// block the connection, a heal restore it, a one-way cut block one direction only, and close() leave nothing.
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { createNetwork, namespacesUnavailable, sweepStale, type Network, type Party } from '../support/netns.js';

const run = promisify(execFile);
const unavailable = namespacesUnavailable();
const PORT = 7070;
/** Long enough for a connect on this network (sub-ms), short enough that a dropped SYN fails the attempt fast. */
const CONNECT_TIMEOUT_MS = 1_000;

/** A TCP server in `party`'s namespace that greets and closes each connection. */
async function greeter(party: Party): Promise<ChildProcess> {
  const script = `require('net').createServer((s) => s.end('hello')).listen(${PORT}, '${party.address}', () => console.log('up'))`;
  const [file = '', ...prefix] = party.spawnPrefix;
  const child = spawn(file, [...prefix, process.execPath, '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  await once(child.stdout, 'data');
  return child;
}

/** Whether a client in `from`'s namespace gets the greeting from `to`'s server. */
async function reaches(from: Party, to: Party): Promise<boolean> {
  const script =
    `const s = require('net').connect(${PORT}, '${to.address}'); s.setTimeout(${CONNECT_TIMEOUT_MS}, () => process.exit(1));` +
    `s.on('data', () => process.exit(0)); s.on('error', () => process.exit(1));`;
  const [file = '', ...prefix] = from.spawnPrefix;
  return run(file, [...prefix, process.execPath, '-e', script], { timeout: 10_000 }).then(
    () => true,
    () => false,
  );
}

/** Whether a datagram sent from `from`'s namespace arrives in `to`'s: one direction alone, no answer needed. */
async function datagramArrives(from: Party, to: Party): Promise<boolean> {
  const receiver =
    `const s = require('dgram').createSocket('udp4'); s.on('message', () => process.exit(0));` +
    `s.bind(${PORT}, '${to.address}', () => console.log('up')); setTimeout(() => process.exit(1), 2000);`;
  const [file = '', ...prefix] = to.spawnPrefix;
  const child = spawn(file, [...prefix, process.execPath, '-e', receiver], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(child, 'exit');
  await once(child.stdout, 'data');
  const sender =
    `const s = require('dgram').createSocket('udp4'); let n = 0;` +
    `const t = setInterval(() => { s.send('x', ${PORT}, '${to.address}', () => {}); if (++n === 5) { clearInterval(t); setTimeout(() => process.exit(0), 100); } }, 100);`;
  const [senderFile = '', ...senderPrefix] = from.spawnPrefix;
  await run(senderFile, [...senderPrefix, process.execPath, '-e', sender], { timeout: 10_000 }).catch(() => undefined);
  const [code] = (await exited) as [number | null];
  return code === 0;
}

async function namespaces(): Promise<string[]> {
  const { stdout } = await run('ip', ['netns', 'list']);
  return stdout.split('\n').map((line) => line.split(' ')[0] ?? '');
}

describe('a network of namespaces', { skip: unavailable }, () => {
  let net: Network | undefined;
  const servers: ChildProcess[] = [];
  after(async () => {
    for (const server of servers) server.kill('SIGKILL');
    await net?.close();
  });

  it('connects two parties, cuts and heals their link both ways and one way, and leaves nothing at close', async () => {
    net = await createNetwork();
    const [a, b] = [await net.addParty('alpha'), await net.addParty('beta')];
    assert.match(net.bridgeAddress, /^10\.\d+\.\d+\.1$/);
    assert.notEqual(a.address, b.address);
    servers.push(await greeter(a), await greeter(b));
    assert.equal(await reaches(a, b), true, 'alpha reaches beta before any cut');

    await net.cut('alpha', 'beta', 'both');
    assert.deepEqual(net.cuts(), [{ from: 'alpha', to: 'beta', mode: 'both' }]);
    assert.equal(await reaches(a, b), false, 'alpha -> beta cut');
    assert.equal(await reaches(b, a), false, 'beta -> alpha cut (the rules are in alpha, both ways)');
    await net.heal('beta', 'alpha');
    assert.deepEqual(net.cuts(), []);
    assert.equal(await reaches(a, b), true, 'healed');

    // One way: alpha's packets to beta are dropped, beta's to alpha arrive. TCP needs both directions, so a
    // connection fails either way; datagrams show the direction.
    await net.cut('alpha', 'beta', 'one-way');
    assert.equal(await reaches(a, b), false, 'alpha -> beta: no connection');
    assert.equal(await datagramArrives(a, b), false, "alpha's datagrams to beta dropped");
    assert.equal(await datagramArrives(b, a), true, "beta's datagrams to alpha arrive");
    await net.healAll();
    assert.equal(await reaches(b, a), true, 'healed: beta -> alpha');
    assert.equal(await reaches(a, b), true, 'healed: alpha -> beta');

    const names = [a.namespace, b.namespace];
    for (const server of servers.splice(0)) server.kill('SIGKILL');
    await net.close();
    const left = await namespaces();
    assert.deepEqual(
      left.filter((name) => names.includes(name)),
      [],
      'no namespace left',
    );
    const { stdout: links } = await run('ip', ['-o', 'link', 'show']);
    assert.doesNotMatch(links, new RegExp(`scx${process.pid}`), 'no bridge or veth left');
  });

  it('sweeps the namespaces of a run whose process is gone', async () => {
    // A pid that is certainly free: a child that has exited.
    const child = spawn(process.execPath, ['-e', '']);
    await once(child, 'exit');
    const deadPid = child.pid!;
    const stale = `scx${deadPid}-left`;
    await run('ip', ['netns', 'add', stale]);
    try {
      const swept = await sweepStale();
      assert.ok(swept.includes(stale), `swept ${swept.join(', ')}`);
      assert.equal((await namespaces()).includes(stale), false);
    } finally {
      await run('ip', ['netns', 'delete', stale]).catch(() => undefined);
    }
  });
});
