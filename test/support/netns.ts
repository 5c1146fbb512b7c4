/**
 * A network of Linux network namespaces, so that a test or the fault campaign can cut a link between two parties
 * and not only kill a process: each party (a Redis node, a Sentinel, a sidecar replica) gets a namespace of its own
 * with its own address, wired to a bridge in the root namespace, where the runner itself listens.
 *
 *   const why = namespacesUnavailable();            // why not here (not root, no `ip`, no `nft`), or undefined
 *   const net = await createNetwork();               // bridge scx<pid>, 10.x.y.1/24 (a /24 no interface uses)
 *   const a = await net.addParty('redis0');          // namespace scx<pid>-redis0, lo up, eth0 at 10.x.y.2/24
 *   spawn(a.spawnPrefix[0], [...a.spawnPrefix.slice(1), 'redis-server', ...])   // `ip netns exec` execs in place:
 *                                                    // the child's pid is the program's, signals reach it
 *   await net.cut('redis0', 'sidecar1', 'both')      // every packet between them dropped
 *   await net.cut('sidecar1', 'redis0', 'one-way')   // sidecar1's packets to redis0 dropped, the others pass
 *   await net.heal('redis0', 'sidecar1'); await net.healAll();
 *   await net.close();                               // processes left in its namespaces, namespaces, bridge gone
 *
 * Cuts are nftables rules inside the cutting party's namespace (an `inet` table with an input and an output chain
 * dropping the addresses of two sets), never on the bridge: whatever the host's `net.bridge.bridge-nf-call-*` say,
 * a cut drops exactly what it names, and the runner on the bridge still reaches every party. Packets are dropped,
 * not refused: a cut peer looks like a dead host, connections hang until their timeouts, as in a real partition.
 *
 * Everything is removed by close(), on the process's exit (synchronously), and on SIGINT/SIGTERM when nothing else
 * handles them. createNetwork() first sweeps what earlier runs left: namespaces and links named with this prefix
 * whose pid is no longer alive.
 */
import { execFile, execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

export type CutMode = 'both' | 'one-way';

export interface Party {
  /** As given to addParty: `redis0`, `sidecar2`. */
  readonly name: string;
  /** The namespace: `<prefix><pid>-<name>`. */
  readonly namespace: string;
  readonly address: string;
  /** Put before a command to run it in the party's namespace. */
  readonly spawnPrefix: readonly string[];
}

export interface Cut {
  /** The party whose namespace drops the packets. */
  readonly from: string;
  readonly to: string;
  readonly mode: CutMode;
}

export interface Network {
  /** The bridge's address: where the runner's own servers listen to be reached from every party. */
  readonly bridgeAddress: string;
  /** The /24 of the network, `10.x.y.0/24`. */
  readonly subnet: string;
  readonly parties: ReadonlyMap<string, Party>;
  addParty(name: string): Promise<Party>;
  party(name: string): Party;
  /** More addresses on the bridge (from .240 up): other sources on the network, e.g. a hostile neighbour's. */
  addBridgeAddresses(count: number): Promise<string[]>;
  /** Drops in `a`'s namespace every packet to and from `b` ('both'), or only `a`'s packets to `b` ('one-way'). */
  cut(a: string, b: string, mode: CutMode): Promise<void>;
  /** Removes every cut between `a` and `b`, whichever side made it. */
  heal(a: string, b: string): Promise<void>;
  healAll(): Promise<void>;
  /** The cuts in force now. */
  cuts(): readonly Cut[];
  close(): Promise<void>;
}

export const DEFAULT_PREFIX = 'scx';
const TABLE = 'scx';
/** The first party's host number in the /24 (the bridge is .1), and the first extra bridge address. */
const FIRST_PARTY = 2;
const FIRST_EXTRA = 240;
/** By their paths: a PATH without /usr/sbin (sudo's, some shells') must not make a spawn fail half-way. */
const IP = findTool('ip') ?? 'ip';
const NFT = findTool('nft') ?? 'nft';

/**
 * `spawn`'s program and arguments for `file args` run after `prefix` (a party's spawnPrefix, or none):
 * `spawn(...prefixed(party.spawnPrefix, 'redis-server', args))`.
 */
export function prefixed(prefix: readonly string[], file: string, args: readonly string[]): [string, string[]] {
  const [first, ...rest] = prefix;
  return first === undefined ? [file, [...args]] : [first, [...rest, file, ...args]];
}

/** Why namespaces cannot be used here, or undefined when they can. */
export function namespacesUnavailable(): string | undefined {
  if (process.platform !== 'linux') return `network namespaces are Linux's (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'network namespaces need root (creating namespaces, a bridge, nftables rules)';
  const missing = ['ip', 'nft'].filter((tool) => findTool(tool) === undefined);
  if (missing.length > 0) {
    const packages = missing.map((tool) => (tool === 'ip' ? 'iproute2' : 'nftables'));
    return `${missing.join(' and ')} not found (apt-get install ${packages.join(' ')})`;
  }
  return undefined;
}

export async function createNetwork(prefix = DEFAULT_PREFIX): Promise<Network> {
  const unavailable = namespacesUnavailable();
  if (unavailable !== undefined) throw new Error(`no network namespaces: ${unavailable}`);
  if (!/^[a-z]{1,4}$/.test(prefix)) throw new Error(`prefix "${prefix}": 1 to 4 lowercase letters`);
  await sweepStale(prefix);
  const run = `${prefix}${process.pid}`;
  const octets = await freeSubnet();
  const address = (host: number): string => `${octets}.${host}`;
  const bridge = run;
  const parties = new Map<string, Party>();
  const veths: string[] = [];
  const extras: string[] = [];
  // Cuts in force, by `from>to`: what heal() removes.
  const cuts = new Map<string, Cut>();
  // Set once close() has removed everything: until then the exit handler removes what is left.
  let removed = false;
  let closing: Promise<void> | undefined;

  // Named in the exit handler below before the first command: a bridge made and then a failure must be removed too.
  const removeAllSync = (): void => {
    for (const party of parties.values()) killInNamespaceSync(party.namespace);
    for (const party of parties.values()) quietSync(IP, ['netns', 'delete', party.namespace]);
    for (const veth of veths) quietSync(IP, ['link', 'delete', veth]);
    quietSync(IP, ['link', 'delete', bridge]);
  };
  const onExit = (): void => {
    if (!removed) removeAllSync();
    removed = true;
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    // Someone else handles it (the campaign's runner closes its world, then exits): the exit handler is the backstop.
    if (process.listenerCount(signal) > 1) return;
    onExit();
    forget();
    process.kill(process.pid, signal);
  };
  process.once('exit', onExit);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const forget = (): void => {
    process.off('exit', onExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };

  const inNamespace = (party: Party, file: string, args: readonly string[], input?: string): Promise<string> =>
    command(IP, ['netns', 'exec', party.namespace, file, ...args], input);
  const setElement = (party: Party, verb: 'add' | 'delete', set: 'cut_in' | 'cut_out', peer: Party): string =>
    `${verb} element inet ${TABLE} ${set} { ${peer.address} }\n`;
  const partyNamed = (name: string): Party => {
    const party = parties.get(name);
    if (party === undefined) throw new Error(`no party ${name} (have ${[...parties.keys()].join(', ')})`);
    return party;
  };
  /** The nft lines that remove one cut from its namespace. */
  const unmake = (cut: Cut): string => {
    const [from, to] = [partyNamed(cut.from), partyNamed(cut.to)];
    const lines = setElement(from, 'delete', 'cut_out', to);
    return cut.mode === 'both' ? lines + setElement(from, 'delete', 'cut_in', to) : lines;
  };

  try {
    await command(IP, ['link', 'add', bridge, 'type', 'bridge']);
    await command(IP, ['addr', 'add', `${address(1)}/24`, 'dev', bridge]);
    await command(IP, ['link', 'set', bridge, 'up']);
  } catch (err) {
    removeAllSync();
    forget();
    throw err;
  }

  const network: Network = {
    bridgeAddress: address(1),
    subnet: `${address(0)}/24`,
    parties,
    async addParty(name) {
      if (!/^[a-z0-9]+$/.test(name)) throw new Error(`party name "${name}": lowercase letters and digits`);
      if (parties.has(name)) throw new Error(`party ${name} exists`);
      const host = FIRST_PARTY + parties.size;
      if (host >= FIRST_EXTRA) throw new Error('too many parties for one /24');
      const namespace = `${run}-${name}`;
      const veth = `${run}v${host}`;
      const party: Party = {
        name,
        namespace,
        address: address(host),
        spawnPrefix: [IP, 'netns', 'exec', namespace],
      };
      // Registered first, so that a failure half-way is undone by close() or the exit handler.
      parties.set(name, party);
      veths.push(veth);
      await command(IP, ['netns', 'add', namespace]);
      // The peer is made inside the namespace at once, as eth0 there: no second name to rename or leak.
      await command(IP, ['link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', namespace]);
      await command(IP, ['link', 'set', veth, 'master', bridge, 'up']);
      await command(IP, ['-n', namespace, 'link', 'set', 'lo', 'up']);
      await command(IP, ['-n', namespace, 'addr', 'add', `${party.address}/24`, 'dev', 'eth0']);
      await command(IP, ['-n', namespace, 'link', 'set', 'eth0', 'up']);
      await inNamespace(party, NFT, ['-f', '-'], cutTable());
      return party;
    },
    party: partyNamed,
    async addBridgeAddresses(count) {
      const added = Array.from({ length: count }, (_, i) => address(FIRST_EXTRA + extras.length + i));
      if (FIRST_EXTRA + extras.length + count > 254) throw new Error('no more bridge addresses');
      for (const extra of added) {
        await command(IP, ['addr', 'add', `${extra}/24`, 'dev', bridge]);
        extras.push(extra);
      }
      return added;
    },
    async cut(a, b, mode) {
      const [from, to] = [partyNamed(a), partyNamed(b)];
      if (from === to) throw new Error(`cannot cut ${a} from itself`);
      let lines = setElement(from, 'add', 'cut_out', to);
      if (mode === 'both') lines += setElement(from, 'add', 'cut_in', to);
      await inNamespace(from, NFT, ['-f', '-'], lines);
      // Listed once in force (nft applies a file as one transaction). A one-way cut made over a two-way one leaves
      // its input side in force: heal() then removes both.
      const previous = cuts.get(`${a}>${b}`);
      cuts.set(`${a}>${b}`, { from: a, to: b, mode: previous?.mode === 'both' ? 'both' : mode });
    },
    async heal(a, b) {
      for (const key of [`${a}>${b}`, `${b}>${a}`]) {
        const cut = cuts.get(key);
        if (cut === undefined) continue;
        cuts.delete(key);
        await inNamespace(partyNamed(cut.from), NFT, ['-f', '-'], unmake(cut));
      }
    },
    async healAll() {
      for (const cut of [...cuts.values()]) await network.heal(cut.from, cut.to);
    },
    cuts: () => [...cuts.values()],
    close() {
      closing ??= (async () => {
        // Whatever still runs in a namespace was started there by this process: it would keep the namespace alive.
        for (const party of parties.values()) await killInNamespace(party.namespace);
        for (const party of parties.values()) await command(IP, ['netns', 'delete', party.namespace]).catch(noop);
        // A veth goes with its namespace, but only once the kernel has freed it: deleted here, it is gone now.
        for (const veth of veths) await command(IP, ['link', 'delete', veth]).catch(noop);
        await command(IP, ['link', 'delete', bridge]).catch(noop);
        removed = true;
        forget();
      })();
      return closing;
    },
  };
  return network;
}

/**
 * Removes the namespaces and links of earlier runs with this prefix whose process is gone (killed, crashed before
 * its cleanup): what still runs in them is killed first, or the namespace would outlive its name. Returns their names.
 */
export async function sweepStale(prefix = DEFAULT_PREFIX): Promise<string[]> {
  const stale = (name: string, pattern: RegExp): boolean => {
    const pid = Number(pattern.exec(name)?.[1] ?? NaN);
    return Number.isInteger(pid) && pid !== process.pid && !alive(pid);
  };
  const namespaces = (await command(IP, ['netns', 'list']))
    .split('\n')
    .map((line) => line.split(' ')[0] ?? '')
    .filter((name) => stale(name, new RegExp(`^${prefix}(\\d+)-[a-z0-9]+$`)));
  for (const namespace of namespaces) {
    await killInNamespace(namespace);
    await command(IP, ['netns', 'delete', namespace]).catch(noop);
  }
  const links = (await command(IP, ['-o', 'link', 'show']))
    .split('\n')
    .map((line) => /^\d+: ([^:@\s]+)/.exec(line)?.[1] ?? '')
    .filter((name) => stale(name, new RegExp(`^${prefix}(\\d+)(?:v\\d+)?$`)));
  // The veths first: a bridge deleted before them would leave them unattached but alive.
  for (const link of links.sort((x, y) => y.length - x.length)) await command(IP, ['link', 'delete', link]).catch(noop);
  return [...namespaces, ...links];
}

/** The party's nftables table: what cut() and heal() fill and empty are its two sets. */
function cutTable(): string {
  return [
    `table inet ${TABLE} {`,
    '  set cut_in { type ipv4_addr; }',
    '  set cut_out { type ipv4_addr; }',
    '  chain input { type filter hook input priority 0; policy accept; ip saddr @cut_in drop; }',
    '  chain output { type filter hook output priority 0; policy accept; ip daddr @cut_out drop; }',
    '}',
    '',
  ].join('\n');
}

/**
 * `10.x.y` of a /24 that overlaps no address or route of the host, starting from one derived from the pid (so that
 * two runs side by side start apart) in 10.100.0.0 to 10.227.255.0.
 */
async function freeSubnet(): Promise<string> {
  const taken = [
    ...(await command(IP, ['-o', '-4', 'addr', 'show'])).matchAll(/inet (\d+\.\d+\.\d+\.\d+\/\d+)/g),
    ...(await command(IP, ['-4', 'route', 'show', 'table', 'all'])).matchAll(/^(\d+\.\d+\.\d+\.\d+\/\d+)/gm),
  ].map((match) => parseCidr(match[1] ?? ''));
  const span = 128 * 256;
  for (let i = 0; i < span; i++) {
    const n = (process.pid + i) % span;
    const candidate = { base: ((10 << 24) | ((100 + (n >> 8)) << 16) | ((n & 255) << 8)) >>> 0, bits: 24 };
    if (!taken.some((cidr) => overlap(cidr, candidate))) return `10.${100 + (n >> 8)}.${n & 255}`;
  }
  throw new Error('no free /24 in 10.100.0.0/9');
}

interface Cidr {
  readonly base: number;
  readonly bits: number;
}

function parseCidr(text: string): Cidr {
  const [address = '', bits = '32'] = text.split('/');
  const base = address.split('.').reduce((value, octet) => ((value << 8) | Number(octet)) >>> 0, 0);
  return { base, bits: Number(bits) };
}

/** Two ranges overlap when they agree on the shorter one's prefix. */
function overlap(a: Cidr, b: Cidr): boolean {
  const bits = Math.min(a.bits, b.bits);
  const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
  return (a.base & mask) >>> 0 === (b.base & mask) >>> 0;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: alive, someone else's.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function killInNamespace(namespace: string): Promise<void> {
  const pids = await command(IP, ['netns', 'pids', namespace]).catch(() => '');
  for (const pid of pids.split('\n').filter((line) => /^\d+$/.test(line))) killQuietly(Number(pid));
}

function killInNamespaceSync(namespace: string): void {
  for (const pid of quietSync(IP, ['netns', 'pids', namespace])
    .split('\n')
    .filter((line) => /^\d+$/.test(line)))
    killQuietly(Number(pid));
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Gone already.
  }
}

function command(file: string, args: readonly string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { timeout: 10_000 }, (err, stdout, stderr) => {
      if (err === null) resolve(stdout);
      else reject(new Error(`${file} ${args.join(' ')}: ${stderr.trim() || err.message}`));
    });
    // A command that reads nothing may be gone before its input is written: that is no error of its own.
    child.stdin?.on('error', noop);
    child.stdin?.end(input);
  });
}

/** For the exit handler, where nothing asynchronous runs any more: errors (already gone) are ignored. */
function quietSync(file: string, args: readonly string[]): string {
  try {
    return execFileSync(file, args, { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5_000 }).toString('utf8');
  } catch {
    return '';
  }
}

function findTool(name: string): string | undefined {
  // /usr/sbin and /sbin hold both, and a non-root PATH may lack them.
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin'];
  for (const dir of dirs.filter((d) => d !== '')) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // Not in this one.
    }
  }
  return undefined;
}

const noop = (): void => undefined;
