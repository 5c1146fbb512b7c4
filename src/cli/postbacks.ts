import { collectConfig } from '../config/load.js';
import {
  RedisInbox,
  POSTBACK_ID,
  type PostbackInbox,
  type PostbackSummary,
  type ReplayPlace,
} from '../postback/inbox.js';
import { openStateStore } from '../state/open-store.js';
import { parseCommandLine, runtimeFailure, usageFailure } from '../tools/usage.js';
import { EXIT, type Command, type CommandIo, type ExitCode } from '../tools/command.js';
import { isoTimestamp } from '../time/utc-time.js';

const USAGE = `usage: signing-sidecar postbacks list [--dead] [--limit N] [--json]
       signing-sidecar postbacks show <id>
       signing-sidecar postbacks replay <id> | --all [--at-end]
       signing-sidecar postbacks drop <id> | --all`;
const HELP = `${USAGE}

The queued postbacks of this account (SIDECAR_POSTBACK_DELIVERY=queued), read from the same Redis and with the
same settings as \`serve\`.

  list     the undelivered postbacks in arrival order (--dead: the dead letters): id, state, attempts, arrival,
           next attempt, last error. States: queued (being delivered or due now), retry (waiting for its next
           attempt), waiting (behind an earlier postback of its transaction), dead (every attempt failed).
  show     one postback whole: the above, the headers the application gets, and the decoded JSON payload.
  replay   a dead letter goes back in line with its attempts from zero, in arrival order: before any later
           postback of its transaction still waiting (one being delivered now goes first). --at-end: behind them
           instead. A later postback already delivered is not undone: the application gets the older status after
           it. A postback waiting for a retry is made due now. --all: every dead letter (oldest first) and retry.
  drop     forgets one postback for good (the application never gets it). --all: every dead letter (a pending
           postback is dropped only by its id).

Prints ids, states, attempts and errors; never the password, tokens or keys, and the payload only on \`show\`.
Exit codes: 0 done, 1 a failure (Redis unreachable, no such postback), 2 bad usage.
`;

const ACTIONS = ['list', 'show', 'replay', 'drop'] as const;
type Action = (typeof ACTIONS)[number];
/** How many postbacks one page of `list` or `--all` reads at once. */
const PAGE = 100;
/** How long the command waits for Redis to answer before it gives up. */
const CONNECT_WAIT_MS = 5_000;

const when = (ms: number | undefined): string => (ms === undefined ? '-' : isoTimestamp(ms));

function line(row: PostbackSummary): string {
  const next = row.state === 'retry' ? when(row.nextAttemptMs) : '-';
  return [
    row.id,
    row.state.padEnd(7),
    String(row.attempts).padStart(3),
    when(row.receivedMs),
    next,
    row.lastError ?? '-',
  ].join('  ');
}

/** Every row of the list, page after page: read whole before any is changed, since a change moves the ranks. */
async function everyRow(inbox: PostbackInbox, which: 'pending' | 'dead'): Promise<PostbackSummary[]> {
  const rows: PostbackSummary[] = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = await inbox.list(which, offset, PAGE);
    rows.push(...page);
    if (page.length < PAGE) return rows;
  }
}

async function act(action: Action, inbox: PostbackInbox, id: string | undefined, flags: Flags, io: CommandIo) {
  if (action === 'list') {
    const rows = await inbox.list(flags.dead ? 'dead' : 'pending', 0, flags.limit);
    if (flags.json) for (const row of rows) io.stdout.write(`${JSON.stringify(row)}\n`);
    else {
      const status = await inbox.status();
      io.stdout.write(`undelivered ${status.undelivered} (retrying ${status.retrying}), dead letters ${status.dead}\n`);
      for (const row of rows) io.stdout.write(`${line(row)}\n`);
    }
    return EXIT.ok;
  }
  if (action === 'show') {
    const detail = id === undefined ? undefined : await inbox.show(id);
    if (detail === undefined) return runtimeFailure(io, `no postback ${id ?? ''} in the inbox`);
    const { payload, ...rest } = detail;
    let decoded: unknown;
    try {
      decoded = JSON.parse(payload);
    } catch {
      decoded = payload;
    }
    io.stdout.write(`${JSON.stringify({ ...rest, payload: decoded }, null, 2)}\n`);
    return EXIT.ok;
  }
  const where: ReplayPlace = flags.atEnd ? 'end' : 'order';
  if (id !== undefined) {
    const result = action === 'replay' ? await inbox.replay(id, where) : (await inbox.drop(id)) ? 'dropped' : 'missing';
    if (result === 'missing') return runtimeFailure(io, `no postback ${id} in the inbox`);
    io.stdout.write(`${id} ${result}\n`);
    return EXIT.ok;
  }
  // Oldest first: a transaction's dead letters go back in their line in the order they arrived.
  const rows = (await everyRow(inbox, 'dead')).sort((a, b) => a.receivedMs - b.receivedMs);
  if (action === 'replay') rows.push(...(await everyRow(inbox, 'pending')).filter((row) => row.state === 'retry'));
  const ids = rows.map((row) => row.id);
  let done = 0;
  for (const each of ids) {
    const result =
      action === 'replay' ? await inbox.replay(each, where) : (await inbox.drop(each)) ? 'dropped' : 'missing';
    if (result !== 'missing' && result !== 'pending') done++;
  }
  io.stdout.write(`${action === 'replay' ? 'replayed' : 'dropped'} ${done} postback${done === 1 ? '' : 's'}\n`);
  return EXIT.ok;
}

interface Flags {
  readonly dead: boolean;
  readonly all: boolean;
  readonly atEnd: boolean;
  readonly json: boolean;
  readonly limit: number;
}

function parse(argv: string[], io: CommandIo): { action: Action; id: string | undefined; flags: Flags } | ExitCode {
  const [first, ...rest] = argv;
  if (first === '--help' || first === '-h') {
    io.stdout.write(HELP);
    return EXIT.ok;
  }
  const action = ACTIONS.find((name) => name === first);
  if (action === undefined)
    return usageFailure(io, USAGE, first === undefined ? 'no action given' : `unknown action "${first}"`);
  const id = rest[0] !== undefined && !rest[0].startsWith('-') ? rest.shift() : undefined;
  const options = {
    dead: { type: 'boolean', default: false },
    all: { type: 'boolean', default: false },
    'at-end': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    limit: { type: 'string', default: String(PAGE) },
  } as const;
  const values = parseCommandLine(rest, options, io, { usage: USAGE, help: HELP });
  if (typeof values === 'number') return values;
  const limit = Number(values.limit);
  if (!Number.isInteger(limit) || limit <= 0) return usageFailure(io, USAGE, '--limit takes a positive whole number');
  const needsId = action === 'show' || ((action === 'replay' || action === 'drop') && !values.all);
  if (needsId && id === undefined)
    return usageFailure(io, USAGE, `${action} needs a postback id${action === 'show' ? '' : ' or --all'}`);
  if (id !== undefined && !POSTBACK_ID.test(id)) {
    return usageFailure(io, USAGE, `"${id}" is not a postback id (pb_ and 32 hex digits, as \`list\` prints them)`);
  }
  if (id !== undefined && (action === 'list' || values.all))
    return usageFailure(io, USAGE, `${action} takes no id here`);
  if (values['at-end'] && action !== 'replay') return usageFailure(io, USAGE, '--at-end is for replay only');
  const flags = { dead: values.dead, all: values.all, atEnd: values['at-end'], json: values.json, limit };
  return { action, id, flags };
}

export const postbacks: Command = async (argv, io) => {
  const parsed = parse(argv, io);
  if (typeof parsed === 'number') return parsed;
  const loaded = await collectConfig(io.env);
  if (!loaded.ok) {
    for (const err of loaded.errors) io.stderr.write(`error: ${err.message}\n`);
    return EXIT.failed;
  }
  const store = await openStateStore(loaded.config);
  if (store.kind !== 'redis') {
    await store.close();
    return runtimeFailure(io, 'the postback inbox lives in Redis: this configuration has SIDECAR_STATE_STORE=memory');
  }
  try {
    if (!(await store.whenAvailable(CONNECT_WAIT_MS, true))) {
      return runtimeFailure(io, `Redis is not reachable: ${store.unavailableReason() ?? 'no answer'}`);
    }
    return await act(parsed.action, new RedisInbox(store), parsed.id, parsed.flags, io);
  } catch (err) {
    return runtimeFailure(io, err instanceof Error ? err.message : 'the inbox could not be read');
  } finally {
    await store.close();
  }
};
