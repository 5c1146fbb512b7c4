// Everything a request handler needs, built once by startSimulator. Handlers take this instead of globals so
// two simulators (staging and production) run side by side in one process without sharing state.
import type { Account } from './accounts.js';
import type { PublicBase } from './canonical-url.js';
import type { SimClock } from './clock.js';
import type { FaultInjector } from './faults.js';
import type { IpAllowList } from './ip-allow.js';
import type { SimLogger } from './log.js';
import type { NonceStore } from './nonce-store.js';
import type { PostbackSender } from './postbacks.js';
import type { RequestLog } from './request-log.js';
import type { TokenStore } from './token-store.js';
import type { TransactionStore } from './transactions.js';

export interface SimContext {
  readonly clock: SimClock;
  readonly accounts: ReadonlyMap<string, Account>;
  /** Union of every account's allowlist: the gateway's firewall, used before the account is known. */
  readonly anyAccountAllows: IpAllowList;
  readonly tokens: TokenStore;
  readonly nonces: NonceStore;
  readonly transactions: TransactionStore;
  readonly postbacks: PostbackSender;
  readonly faults: FaultInjector;
  /** The newest requests and their verdicts, for the dashboard. */
  readonly requests: RequestLog;
  readonly logger: SimLogger;
  readonly refreshTokenField: string;
  readonly maxBodyBytes: number;
  /** Aborted by close(): anything still waiting (a delay fault) must stop instead of touching a closed simulator. */
  readonly closing: AbortSignal;
  /** Resolved after listen when no public base URL was configured (it defaults to the listen address). */
  base(): PublicBase;
}

/** What the log line of a refused or accepted request says about where it came from. */
export interface RequestInfo {
  readonly method: string;
  readonly path: string;
  readonly ip: string | undefined;
  account?: string;
}
