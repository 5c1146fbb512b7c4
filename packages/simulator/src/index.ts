// Public entry of the gateway simulator: startSimulator() wires the stores, the verifier and the HTTP(S)
// server, and returns handles that tests, the demo and the bench use instead of the HTTP control API.
import { createPrivateKey, createPublicKey, generateKeyPair } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { AccountConfigError, loadAccounts } from './accounts.js';
import type { Account } from './accounts.js';
import { parsePublicBase } from './canonical-url.js';
import { createClock } from './clock.js';
import { createFaultInjector } from './faults.js';
import { createAllowList } from './ip-allow.js';
import { silentLogger } from './log.js';
import { createNonceStore } from './nonce-store.js';
import { DEFAULT_HOST, DEFAULT_REFRESH_TOKEN_FIELD, checkNumericOptions } from './options.js';
import { createPostbackSender } from './postbacks.js';
import { createRequestLog } from './request-log.js';
import { createRequestListener } from './server.js';
import { generateTlsMaterial } from './tls.js';
import type { TlsMaterial } from './tls.js';
import {
  DEFAULT_ACCESS_TOKEN_TTL_SECONDS,
  DEFAULT_REFRESH_TOKEN_TTL_SECONDS,
  createTokenStore,
} from './token-store.js';
import type { GrantCounts } from './token-store.js';
import { createTransactionStore, transactionJson } from './transactions.js';
import { MAX_BODY_BYTES } from './http-io.js';
import type { PublicBase } from './canonical-url.js';
import type { SimContext } from './context.js';
import type { ArmedFault, FaultSpec } from './faults.js';
import type { SimulatorOptions } from './options.js';
import type { PostbackAttempt } from './postbacks.js';
import type { FinalStatus, SimTransaction } from './transactions.js';

export type { SimulatorOptions, SimulatorTlsOptions } from './options.js';
export type { SimulatorAccountInput } from './accounts.js';
export { AccountConfigError, DEFAULT_ALLOW_IPS } from './accounts.js';
export { readAccountsFile } from './accounts-file.js';
export { createSimLogger } from './log.js';
export type { FaultSpec, FaultKind, FaultTarget, ArmedFault } from './faults.js';
export type { PostbackAttempt, PostbackRetryOptions } from './postbacks.js';
export type { GrantCounts } from './token-store.js';
export type { FinalStatus, SimTransaction, TransactionStatus, TransactionType } from './transactions.js';

export interface RunningSimulator {
  /** The public base address used to rebuild signed URLs: configure the sidecar's SIDECAR_BASE_URL with it. */
  readonly baseUrl: string;
  /** Where the server actually listens (differs from baseUrl when a public address was configured). */
  readonly listenUrl: string;
  readonly port: number;
  /** PEM to trust for HTTPS (write it to SIDECAR_UPSTREAM_CA_FILE); undefined over plain HTTP. */
  readonly caPem: string | undefined;
  /** The key vendors use to verify signed postbacks. */
  readonly postbackPublicKeyPem: string;
  readonly clock: {
    shift(seconds: number): void;
    setOffset(seconds: number): void;
    offsetSeconds(): number;
    nowSeconds(): number;
  };
  readonly faults: { inject(spec: FaultSpec): ArmedFault; clear(): void; pending(): ArmedFault[] };
  transactions(): SimTransaction[];
  /** Completes a PENDING transaction and starts its postback; rejects for unknown or final transactions. */
  complete(id: string, status: FinalStatus): Promise<SimTransaction>;
  postbacks(): PostbackAttempt[];
  /** Successful grants of the token endpoint so far, per kind (password logins, refreshes). */
  tokenGrants(): GrantCounts;
  /** Replaces an account's public keys (a key rotation: both keys, then the new one); throws for a bad key. */
  setPublicKeys(username: string, publicKeyPems: readonly string[]): void;
  close(): Promise<void>;
}

export async function startSimulator(options: SimulatorOptions): Promise<RunningSimulator> {
  checkNumericOptions(options);
  const accounts = loadAccounts(options.accounts);
  let base: PublicBase | undefined =
    options.publicBaseUrl === undefined ? undefined : parsePublicBase(options.publicBaseUrl);
  const [postbackKey, tls] = await Promise.all([postbackPrivateKey(options), tlsMaterial(options, base)]);
  const closing = new AbortController();
  const ctx = buildContext(options, accounts, postbackKey, closing.signal, () => {
    if (base === undefined) throw new Error('simulator base address used before listen');
    return base;
  });
  const listener = createRequestListener(ctx);
  const server: Server =
    tls === undefined
      ? createHttpServer(listener)
      : createHttpsServer({ cert: tls.certPem, key: tls.keyPem }, listener);
  hardenServer(server, ctx);
  const listenUrl = await listen(server, options.host ?? DEFAULT_HOST, options.port ?? 0, tls !== undefined);
  base ??= parsePublicBase(listenUrl);
  const baseUrl = base.origin + base.pathPrefix;
  ctx.logger.info({ event: 'sim.started', listenUrl, baseUrl, accounts: [...accounts.keys()] }, 'simulator listening');
  return {
    baseUrl,
    listenUrl,
    port: (server.address() as AddressInfo).port,
    caPem: tls?.caPem,
    postbackPublicKeyPem: createPublicKey(postbackKey).export({ type: 'spki', format: 'pem' }).toString(),
    clock: ctx.clock,
    faults: {
      inject: (spec) => ctx.faults.add(spec),
      clear: () => ctx.faults.clear(),
      pending: () => ctx.faults.list(),
    },
    transactions: () => ctx.transactions.list().map(transactionJson),
    complete: (id, status) => Promise.resolve().then(() => transactionJson(ctx.transactions.complete(id, status))),
    postbacks: () => ctx.postbacks.attempts(),
    tokenGrants: () => ctx.tokens.grants(),
    setPublicKeys: (username, pems) => {
      const account = accounts.get(username);
      if (account === undefined) throw new AccountConfigError(`no account ${username}`);
      account.setPublicKeys(pems);
    },
    close: () => shutdown(server, ctx, closing),
  };
}

function buildContext(
  options: SimulatorOptions,
  accounts: Map<string, Account>,
  postbackKey: KeyObject,
  closing: AbortSignal,
  base: () => PublicBase,
): SimContext {
  const logger = options.logger ?? silentLogger();
  const clock = createClock();
  const postbacks = createPostbackSender({
    clock,
    privateKey: postbackKey,
    logger,
    retry: options.postbackRetry ?? {},
  });
  const transactions = createTransactionStore({
    clock,
    autoCompleteMs: options.postbackDelayMs ?? null,
    autoCompleteStatus: options.autoCompleteStatus ?? 'SUCCESS',
    onFinal: (tx) => {
      const account = accounts.get(tx.username);
      if (account?.webhookUrl === undefined) return;
      postbacks.send({ url: account.webhookUrl, signed: account.signedPostbacks }, tx);
    },
  });
  return {
    clock,
    accounts,
    anyAccountAllows: createAllowList([...accounts.values()].flatMap((a) => a.allowIps)),
    tokens: createTokenStore(clock, {
      accessSeconds: options.accessTokenTtlSeconds ?? DEFAULT_ACCESS_TOKEN_TTL_SECONDS,
      refreshSeconds: options.refreshTokenTtlSeconds ?? DEFAULT_REFRESH_TOKEN_TTL_SECONDS,
      loginRevokesRefresh: options.loginRevokesRefresh ?? false,
    }),
    nonces: createNonceStore(clock, options.nonceWindowSeconds),
    transactions,
    postbacks,
    faults: createFaultInjector(),
    requests: createRequestLog(),
    logger,
    refreshTokenField: options.refreshTokenField ?? DEFAULT_REFRESH_TOKEN_FIELD,
    maxBodyBytes: options.maxBodyBytes ?? MAX_BODY_BYTES,
    closing,
    base,
  };
}

async function postbackPrivateKey(options: SimulatorOptions): Promise<KeyObject> {
  if (options.postbackPrivateKeyPem !== undefined) return createPrivateKey(options.postbackPrivateKeyPem);
  const { privateKey } = await promisify(generateKeyPair)('rsa', { modulusLength: 2048 });
  return privateKey;
}

async function tlsMaterial(options: SimulatorOptions, base: PublicBase | undefined): Promise<TlsMaterial | undefined> {
  const tls = options.tls;
  if (tls === undefined || tls === false) return undefined;
  if (tls === true) return generateTlsMaterial(base === undefined ? options.host : new URL(base.origin).hostname);
  return { certPem: tls.certPem, keyPem: tls.keyPem, caPem: tls.caPem };
}

/** Bounds what a slow or broken client can hold, and answers unparsable HTTP instead of hanging up silently. */
function hardenServer(server: Server, ctx: SimContext): void {
  server.headersTimeout = 15_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    ctx.logger.warn({ event: 'request.malformed', reason: err.code ?? err.message }, 'unparsable HTTP request');
    // Oversized headers are a size problem, not a syntax one: 431 tells the client which of its habits to fix.
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    else socket.destroy();
  });
}

function listen(server: Server, host: string, port: number, https: boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const { address, port: actual } = server.address() as AddressInfo;
      // A wildcard bind is reachable on loopback; that is the address a local client should use.
      const shown = address === '0.0.0.0' ? '127.0.0.1' : address === '::' ? '::1' : address;
      const hostPart = shown.includes(':') ? `[${shown}]` : shown;
      resolve(`${https ? 'https' : 'http'}://${hostPart}:${actual}`);
    });
  });
}

async function shutdown(server: Server, ctx: SimContext, closing: AbortController): Promise<void> {
  // First, so requests parked in a delay fault clear their timers and drop their sockets instead of resuming.
  closing.abort();
  ctx.transactions.stop();
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  await Promise.all([closed, ctx.postbacks.close()]);
}
