// A fleet for end-to-end tests: the real simulator (strict by default: a login revokes every earlier refresh
// token), a real redis-server, and N real sidecars in this process on SIDECAR_STATE_STORE=redis, plus a steady
// stream of payments spread over whichever sidecars are live, as a Service spreads them over ready pods.
import { setTimeout as sleep } from 'node:timers/promises';
import { startSimulator, type RunningSimulator } from '@signing-sidecar/simulator';
import { makeKeys, type TestKeys } from './keys.js';
import { TEST_PASSWORD, TEST_USERNAME } from './recording-gateway.js';
import { startRedis, type TestRedis } from './redis-server.js';
import { deposit, postJson } from './sim-world.js';
import { sidecarEnv, startTestSidecar, waitUntilReady, type TestSidecar } from './sidecar.js';

export interface FleetWorld {
  readonly simulator: RunningSimulator;
  readonly redis: TestRedis;
  readonly keys: TestKeys;
  /** The sidecars serving now, in pod order. */
  readonly pods: TestSidecar[];
  /** Every sidecar started, stopped ones included (their logs and metrics are part of the run). */
  readonly everyPod: TestSidecar[];
  /** Stops pod `index` (taken out of the traffic first) and starts its replacement, ready with a token. */
  replace(index: number): Promise<void>;
  /** Payments over the live pods until stopped, or until close(): a failed assertion leaves no caller running. */
  startTraffic(): Traffic;
  close(): Promise<void>;
}

export interface FleetOptions {
  readonly replicas: number;
  readonly accessTokenTtlSeconds: number;
  readonly env?: NodeJS.ProcessEnv;
}

export async function startFleet(options: FleetOptions): Promise<FleetWorld> {
  const keys = await makeKeys();
  const [simulator, redis] = await Promise.all([
    startSimulator({
      accounts: [{ username: TEST_USERNAME, password: TEST_PASSWORD, publicKeyPem: keys.publicKeyPem }],
      loginRevokesRefresh: true,
      accessTokenTtlSeconds: options.accessTokenTtlSeconds,
    }),
    startRedis(),
  ]);
  const env = await sidecarEnv(keys, simulator.baseUrl, {
    SIDECAR_STATE_STORE: 'redis',
    SIDECAR_REDIS_URL: redis.url,
    SIDECAR_LOG_LEVEL: 'info',
    ...options.env,
  });
  const startPod = async (): Promise<TestSidecar> => {
    const pod = await startTestSidecar(env);
    everyPod.push(pod);
    await waitUntilReady(pod.sidecar, 10_000);
    return pod;
  };
  const everyPod: TestSidecar[] = [];
  const traffics: Traffic[] = [];
  const pods = await Promise.all(Array.from({ length: options.replicas }, startPod));
  return {
    simulator,
    redis,
    keys,
    pods,
    everyPod,
    async replace(index) {
      const [old] = pods.splice(index, 1);
      // Out of the endpoints first, as readiness would take it out; then the graceful stop.
      await sleep(100);
      await old?.stop();
      pods.splice(index, 0, await startPod());
    },
    startTraffic() {
      const traffic = new Traffic(pods);
      traffics.push(traffic);
      return traffic;
    },
    async close() {
      await Promise.all(traffics.map((traffic) => traffic.stop()));
      await Promise.all(everyPod.map((pod) => pod.stop()));
      await Promise.all([simulator.close(), redis.close()]);
    },
  };
}

export interface Answer {
  readonly status: number;
  readonly code: string | undefined;
  readonly atMs: number;
  readonly ms: number;
}

/** Payments at a steady pace from `workers` callers, each to the next live pod in turn, until stopped. */
export class Traffic {
  readonly answers: Answer[] = [];
  private running = true;
  private readonly workers: Promise<void>[];
  private turn = 0;
  /** When each payment still waiting for its answer was sent (performance.now()). */
  private readonly pending = new Set<{ readonly sentAt: number }>();

  constructor(
    private readonly pods: readonly TestSidecar[],
    workers = 4,
    private readonly pauseMs = 80,
  ) {
    this.workers = Array.from({ length: workers }, () => this.work());
  }

  async stop(): Promise<Answer[]> {
    this.running = false;
    await Promise.all(this.workers);
    return this.answers;
  }

  /** Answers that came back after `sinceMs` (performance.now()). */
  since(sinceMs: number): Answer[] {
    return this.answers.filter((a) => a.atMs >= sinceMs);
  }

  /** Whether every payment sent before `sinceMs` has its answer (those sent with a token replaced since then). */
  answeredAllBefore(sinceMs: number): boolean {
    return [...this.pending].every(({ sentAt }) => sentAt >= sinceMs);
  }

  private async work(): Promise<void> {
    while (this.running) {
      const pod = this.pods[this.turn++ % Math.max(1, this.pods.length)];
      if (pod !== undefined) {
        const payment = { sentAt: performance.now() };
        this.pending.add(payment);
        const answer = await postJson(pod.sidecar.egressUrl, deposit()).catch(() => undefined);
        this.pending.delete(payment);
        const atMs = performance.now();
        this.answers.push({ status: answer?.status ?? 0, code: answer?.code, atMs, ms: atMs - payment.sentAt });
      }
      await sleep(this.pauseMs);
    }
  }
}

/** The access token each pod would sign with now (undefined when it holds none). */
export function podTokens(pods: readonly TestSidecar[]): Array<string | undefined> {
  return pods.map((pod) => pod.sidecar.tokens.usableToken()?.accessToken.reveal());
}
