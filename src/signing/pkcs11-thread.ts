// The PKCS#11 calls that wait on the token, on a thread of their own (a worker thread): C_SignInit and C_Sign for each
// signature, and the reopen after an outage (C_Finalize, C_Initialize, C_OpenSession, C_Login, C_FindObjects). On a
// network HSM or a cloud KMS each can be a round trip, and the C_Initialize of a module whose device is away waits
// for the module's own timeouts: on the event loop, every request, health probe and metric scrape would wait too.
//
// The module is the process's: one dlopen, initialised with CKF_OS_LOCKING_OK, its handles valid on every thread. The
// signer opens the token on the main thread at start (so that `serve` refuses to start with the line naming the
// setting); this thread signs on those sessions, and opens the token again after an outage.
//
// The worker runs this same file (in the image's bundle, the chunk it is in): serveToken, at the end, starts when the
// file is loaded on the token's thread.
import { createPublicKey } from 'node:crypto';
import { isMainThread, parentPort, Worker, workerData, type MessagePort } from 'node:worker_threads';
import { ConfigError } from '../errors.js';
import { Secret } from '../config/secret.js';
import { describePkcs11Error, loadPkcs11Binding, type Handle } from './pkcs11-binding.js';
import {
  finalizeQuietly,
  initialize,
  openForSigning,
  type Pkcs11Mechanism,
  type SigningSettings,
  type TokenKey,
} from './pkcs11-token.js';

/** What the signer keeps of an open token: enough to sign and to say which key it is. */
export interface OpenState {
  readonly tokenLabel: string;
  readonly mechanism: Pkcs11Mechanism;
  readonly key: TokenKey;
  readonly sessions: Handle[];
}

type Request =
  | {
      readonly kind: 'sign';
      readonly id: number;
      readonly session: Handle;
      readonly key: Handle;
      readonly mechanism: Pkcs11Mechanism;
      readonly input: Buffer;
      readonly bytes: number;
    }
  | { readonly kind: 'reopen'; readonly id: number; readonly pin: string };

/** A key as it crosses threads: its public half as SPKI DER (a KeyObject is rebuilt on the other side). */
type KeyMessage = Omit<TokenKey, 'publicKey'> & { readonly publicKeyDer: Uint8Array };

type Reply =
  | { readonly id: number; readonly signature: Uint8Array }
  | {
      readonly id: number;
      readonly opened: Omit<OpenState, 'key'> & { readonly key: KeyMessage };
    }
  /** `setting`: the refusal is a ConfigError's; `reason`: its text, or the CKR_* name of a token error. */
  | { readonly id: number; readonly failure: { readonly setting?: string; readonly reason: string } };

interface ThreadData {
  readonly role: typeof ROLE;
  readonly module: string;
  readonly settings: Omit<SigningSettings, 'publicKey'> & { readonly publicKeyDer: Uint8Array | undefined };
}

const ROLE = 'pkcs11-token';

/**
 * The worker's first code. Under tsx (the tests, `npm run dev`) the file is TypeScript, which a worker cannot load
 * until tsx is registered in it; the built and the bundled sidecar load JavaScript directly.
 */
// process.getBuiltinModule, not require: the image's bundle gives require() to the one chunk that calls it
// (scripts/bundle.ts), and a free `require(` here, even in a string, would count as a call.
const BOOT = `
const { workerData } = process.getBuiltinModule('node:worker_threads');
const ready = workerData.tsx === undefined ? Promise.resolve() : import(workerData.tsx).then((tsx) => tsx.register());
ready.then(() => import(workerData.entry));
`;

/** The token's thread, as the signer on the main thread sees it. */
export class Pkcs11Thread {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, (reply: Reply) => void>();
  private nextId = 0;

  constructor(private readonly settings: SigningSettings) {
    // Started now, so that the first signature does not wait for the thread to load.
    this.worker = this.spawn();
  }

  /** C_SignInit, then C_Sign (on libuv's thread pool), on `session`. Rejects with the token's error. */
  async sign(session: Handle, key: Handle, mechanism: Pkcs11Mechanism, input: Buffer, bytes: number): Promise<Buffer> {
    const reply = await this.request((id) => ({ kind: 'sign', id, session, key, mechanism, input, bytes }));
    if ('signature' in reply) return asBuffer(reply.signature);
    throw failureOf(reply);
  }

  /** Finalises the module and opens the token again from scratch. Rejects with a ConfigError or the token's error. */
  async reopen(pin: Secret): Promise<OpenState> {
    const reply = await this.request((id) => ({ kind: 'reopen', id, pin: pin.reveal() }));
    if ('opened' in reply) {
      const { key, sessions } = reply.opened;
      return {
        ...reply.opened,
        key: {
          ...key,
          handle: asBuffer(key.handle),
          publicKey: createPublicKey({ key: asBuffer(key.publicKeyDer), format: 'der', type: 'spki' }),
        },
        sessions: sessions.map(asBuffer),
      };
    }
    throw failureOf(reply);
  }

  /** Ends the thread; what it was asked and has not answered is refused. */
  stop(): void {
    void this.worker?.terminate();
    this.worker = undefined;
  }

  private request(make: (id: number) => Request): Promise<Reply> {
    const worker = (this.worker ??= this.spawn());
    const id = this.nextId++;
    return new Promise((resolve) => {
      // A thread with nothing asked of it never keeps the process alive (`check`, `sign` exit when done).
      if (this.pending.size === 0) worker.ref();
      this.pending.set(id, resolve);
      worker.postMessage(make(id));
    });
  }

  private settle(reply: Reply): void {
    const resolve = this.pending.get(reply.id);
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker?.unref();
    resolve?.(reply);
  }

  private spawn(): Worker {
    const { publicKey, ...settings } = this.settings;
    const data: ThreadData = {
      role: ROLE,
      module: settings.module,
      settings: { ...settings, publicKeyDer: publicKey?.export({ type: 'spki', format: 'der' }) },
    };
    const entry = import.meta.url;
    const tsx = entry.endsWith('.ts') ? import.meta.resolve('tsx/esm/api') : undefined;
    const worker = new Worker(BOOT, { eval: true, workerData: { ...data, entry, tsx } });
    worker.unref();
    worker.on('message', (reply: Reply) => this.settle(reply));
    // A thread that failed or ended refuses what was asked of it: the signer goes down and asks a new one to reopen.
    const lost = (reason: string) => {
      if (this.worker === worker) this.worker = undefined;
      for (const id of [...this.pending.keys()]) this.settle({ id, failure: { reason } });
    };
    worker.on('error', () => lost('Pkcs11ThreadFailed'));
    worker.on('exit', () => lost('Pkcs11ThreadEnded'));
    return worker;
  }
}

function failureOf(reply: Reply): Error {
  if (!('failure' in reply)) return new Error('unexpected reply from the PKCS#11 thread');
  const { setting, reason } = reply.failure;
  if (setting !== undefined) return new ConfigError(setting, reason);
  // The CKR_* name as the message, as in the binding's own errors; any other reason (a JavaScript error's name, the
  // thread lost) as the name: describePkcs11Error reports either.
  const error = new Error(reason);
  error.name = reason.startsWith('CKR_') ? 'Pkcs11Error' : reason;
  return error;
}

/** A Buffer over the bytes a message carried (postMessage hands a Buffer over as a plain Uint8Array). */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The token's thread: its own handle on the module, and the calls the signer asks of it. */
function serveToken(port: MessagePort, data: ThreadData): void {
  const binding = loadPkcs11Binding();
  const library = binding?.newLibrary();
  library?.load(data.module);
  const { publicKeyDer, ...given } = data.settings;
  const settings: SigningSettings = {
    ...given,
    key: { label: given.key.label, id: given.key.id === undefined ? undefined : asBuffer(given.key.id) },
    publicKey:
      publicKeyDer === undefined
        ? undefined
        : createPublicKey({ key: asBuffer(publicKeyDer), format: 'der', type: 'spki' }),
  };
  const reply = (message: Reply) => port.postMessage(message);
  const fail = (id: number, err: unknown) =>
    reply({
      id,
      failure:
        err instanceof ConfigError
          ? { setting: err.setting, reason: err.reason }
          : { reason: describePkcs11Error(err) },
    });
  port.on('message', (request: Request) => {
    if (binding === undefined || library === undefined) return fail(request.id, new Error('pkcs11js is not installed'));
    if (request.kind === 'sign') {
      const session = asBuffer(request.session);
      const input = asBuffer(request.input);
      try {
        library.C_SignInit(session, { mechanism: binding.constants[request.mechanism] }, asBuffer(request.key));
        void library
          .C_SignAsync(session, input, Buffer.alloc(request.bytes))
          .then(
            (signature) => reply({ id: request.id, signature }),
            (err: unknown) => fail(request.id, err),
          )
          // `input` stays referenced until the token has finished with it (the binding keeps no reference).
          .finally(() => input.fill(0, 0, 0));
      } catch (err) {
        fail(request.id, err);
      }
      return;
    }
    finalizeQuietly(library);
    try {
      initialize(binding, library);
      const { token, key, sessions } = openForSigning(binding, library, settings, new Secret(request.pin));
      const { publicKey, ...described } = key;
      reply({
        id: request.id,
        opened: {
          tokenLabel: token.tokenLabel,
          mechanism: token.mechanism,
          key: { ...described, publicKeyDer: publicKey.export({ type: 'spki', format: 'der' }) },
          sessions,
        },
      });
    } catch (err) {
      finalizeQuietly(library);
      fail(request.id, err);
    }
  });
}

if (!isMainThread && parentPort !== null && (workerData as Partial<ThreadData> | null)?.role === ROLE) {
  serveToken(parentPort, workerData as ThreadData);
}
