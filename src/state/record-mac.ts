// MACs on every record the sidecar keeps in Redis and reads back (docs/security.md, "Records in Redis"): an
// idempotency record's answer is replayed to a caller, a queued postback is delivered to the application as verified,
// the token record's access token is sent to the gateway, a delivered mark answers a postback without delivering it.
// Whoever can write under the key prefix (another tenant of a shared Redis, a leaked Redis password) could write any
// of them. An HMAC-SHA256 keyed by a secret Redis never holds (SIDECAR_STATE_MAC_KEY_FILE) lets the reader refuse
// what no sidecar wrote. It covers the stored bytes and the full key they are stored under, so a genuine record moved
// to another key (another Idempotency-Key, another postback id) fails too. The Redis store seals and opens every value
// itself (redis-store.ts); scripts that write a record pass a value sealed here.
//
// Format, version 1: a tag `mac1.<43 base64url characters: the 32 bytes of the HMAC>`. A record kept as one string
// (idempotency) is stored as `<tag>.<content>`; one kept as several fields (a postback's hash) stores the tag in a
// field of its own. The HMAC's input is `mac1\n` followed by the stored key and each part, each one preceded by its
// length in bytes and a colon, so that no two different (key, parts) give the same input.
import { createHmac, timingSafeEqual, type KeyObject } from 'node:crypto';
import { STATE_RECORD_KINDS, type StateRecordKind } from '../observability/state-store-metrics.js';

const VERSION = 'mac1';
/** `mac1.` and 43 base64url characters (32 bytes, unpadded). */
const TAG_LENGTH = VERSION.length + 1 + 43;
const TAG = /^mac1\.[A-Za-z0-9_-]{43}$/;

/** What a record is, as the rejection metric's `kind` label says it. */
export type RecordKind = StateRecordKind;

/** The kind of the record stored under a short name: its first segment (`token:record` is a token record). */
export function recordKindOf(name: string): RecordKind {
  const segment = name.slice(0, name.indexOf(':'));
  return (STATE_RECORD_KINDS as readonly string[]).includes(segment) ? (segment as RecordKind) : 'other';
}

/** unsigned: the record carries no MAC; mismatch: its MAC is not one any key in use gives (forged, moved, or keyed
 * with a key this replica does not have). */
export type RecordRejection = 'unsigned' | 'mismatch';

export interface RecordRejected {
  readonly kind: RecordKind;
  readonly reason: RecordRejection;
  /** The record's key without the prefix (`idempotency:<sha256>`, `token:record`): never its content. */
  readonly key: string;
}

export interface RecordMacOptions {
  /** Newest first: the first signs, every one verifies (a rotation keeps the previous key in the file a while). */
  readonly keys: readonly KeyObject[];
  /** The key prefix and account tag the store puts before every name (`signing-sidecar:{<tag>}:`). */
  readonly scope: string;
  /** SIDECAR_STATE_ACCEPT_UNSIGNED_RECORDS: records without a MAC are read (a rollout, or the MAC turned off). */
  readonly acceptUnsigned: boolean;
  /** Called for each record refused: the caller counts and logs it. */
  readonly onRejected: (rejected: RecordRejected) => void;
}

export type OpenedRecord = { readonly content: string } | { readonly rejected: RecordRejection };

/**
 * Signs records for the store and checks them back. With no key at all nothing is signed nor checked (the MAC is
 * off: SIDECAR_STATE_MAC_KEY_FILE unset); a tag found then is skipped unchecked.
 */
export class RecordMac {
  private keys: readonly KeyObject[];

  constructor(private readonly options: RecordMacOptions) {
    this.keys = options.keys;
  }

  /** A rotation of the key file: records are signed with the new first key from now on. */
  replaceKeys(keys: readonly KeyObject[]): void {
    this.keys = keys;
  }

  /** The tag of `parts` stored under `name`; undefined when no key is set. */
  tag(name: string, parts: readonly string[]): string | undefined {
    const [signing] = this.keys;
    if (signing === undefined) return undefined;
    return this.tagWith(signing, name, parts);
  }

  /** Undefined when the record may be used; else why it is refused (reported to onRejected). */
  check(
    kind: RecordKind,
    name: string,
    parts: readonly string[],
    tag: string | undefined,
    report = true,
  ): RecordRejection | undefined {
    const reason = this.verdict(name, parts, tag);
    if (reason !== undefined && report) this.options.onRejected({ kind, reason, key: name });
    return reason;
  }

  /** A one-string record as stored: `<tag>.<content>`, or the content alone when no key is set. */
  seal(name: string, content: string): string {
    const tag = this.tag(name, [content]);
    return tag === undefined ? content : `${tag}.${content}`;
  }

  /**
   * Every stored form of `content` under `name` that opens: sealed with each key in use, and the content alone while
   * unsigned records are read. For a script that compares a record it cannot open itself (inbox-scripts.ts).
   */
  sealsOf(name: string, content: string): string[] {
    const sealed = this.keys.map((key) => `${this.tagWith(key, name, [content])}.${content}`);
    return this.keys.length === 0 || this.options.acceptUnsigned ? [...sealed, content] : sealed;
  }

  /**
   * The content of a sealed record, or why it is refused (reported to onRejected with its kind from its name, unless
   * `report` is false: the caller reported this very record already).
   */
  open(name: string, stored: string, report = true): OpenedRecord {
    const tagged = stored.length > TAG_LENGTH && stored[TAG_LENGTH] === '.' && stored.startsWith(`${VERSION}.`);
    const tag = tagged ? stored.slice(0, TAG_LENGTH) : undefined;
    const content = tagged ? stored.slice(TAG_LENGTH + 1) : stored;
    const rejected = this.check(recordKindOf(name), name, [content], tag, report);
    return rejected === undefined ? { content } : { rejected };
  }

  /** True while records are signed and checked (a key file is set). */
  get on(): boolean {
    return this.keys.length > 0;
  }

  private verdict(name: string, parts: readonly string[], tag: string | undefined): RecordRejection | undefined {
    if (this.keys.length === 0) return undefined;
    if (tag === undefined || tag === '') return this.options.acceptUnsigned ? undefined : 'unsigned';
    // A wrong MAC is refused even while unsigned records are accepted: it is no older sidecar's record.
    if (!TAG.test(tag)) return 'mismatch';
    const given = Buffer.from(tag.slice(VERSION.length + 1), 'base64url');
    return this.keys.some((key) => timingSafeEqual(this.hmac(key, name, parts), given)) ? undefined : 'mismatch';
  }

  private tagWith(key: KeyObject, name: string, parts: readonly string[]): string {
    return `${VERSION}.${this.hmac(key, name, parts).toString('base64url')}`;
  }

  private hmac(key: KeyObject, name: string, parts: readonly string[]): Buffer {
    const hmac = createHmac('sha256', key).update(`${VERSION}\n`);
    for (const field of [this.options.scope + name, ...parts])
      hmac.update(`${Buffer.byteLength(field)}:`).update(field);
    return hmac.digest();
  }
}

/** No key: records are written and read as they are (the memory store, or a Redis without the MAC). */
export const NO_RECORD_MAC = new RecordMac({ keys: [], scope: '', acceptUnsigned: true, onRejected: () => undefined });
