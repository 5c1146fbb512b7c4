// The memory budget (src/memory/budget.ts) and its pressure (pressure.ts): where the limit is read, how it is shared,
// which settings cannot fit, and shedding with its two marks. The 256 MiB row is docs/operations.md's sizing table,
// written out here: a test that computed it with the same formula could not catch a wrong one.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from '../../src/errors.js';
import {
  checkBudgetFits,
  containerLimitBytes,
  memoryBudget,
  MIB,
  oldSpaceBytes,
  storeMaxBytes,
  type ProcessMemory,
} from '../../src/memory/budget.js';
import { MemoryPressure, type MemoryReading } from '../../src/memory/pressure.js';

const POD: ProcessMemory = { containerLimitBytes: 256 * MIB, oldSpaceBytes: 192 * MIB, heapLimitBytes: 204 * MIB };
const budgetOf = (process: ProcessMemory, limitMb: number | 'auto' = 'auto', maxBodyBytes = 1_048_576) =>
  memoryBudget({ limitMb, process, maxBodyBytes, maxPostbackBodyBytes: 1_048_576 });
const mib = (bytes: number) => Math.round((bytes / MIB) * 10) / 10;

describe('memory budget', () => {
  it("a 256 MiB pod with the image's heap flags: the shares of the sizing table", () => {
    const budget = budgetOf(POD);
    assert.equal(budget.source, 'container');
    assert.equal(budget.limitBytes, 256 * MIB);
    assert.deepEqual(
      {
        runtime: mib(budget.shares.runtime),
        headroom: mib(budget.shares.headroom),
        bodies: mib(budget.shares.bodies),
        store: mib(budget.shares.store),
        egressPool: mib(budget.egressBodyPoolBytes),
        postbackPool: mib(budget.postbackBodyPoolBytes),
        shedAt: mib(budget.rssHighWaterBytes),
        backUnder: mib(budget.rssLowWaterBytes),
      },
      {
        runtime: 72,
        headroom: 38.4,
        bodies: 36.4,
        store: 72.8,
        egressPool: 2.3,
        postbackPool: 2.3,
        shedAt: 230.4,
        backUnder: 204.8,
      },
    );
    assert.equal(budget.fittingOldSpaceMb, 192);
    // The shares fit the limit together.
    const { runtime, headroom, bodies, store } = budget.shares;
    assert.ok(runtime + headroom + bodies + store <= budget.limitBytes);
  });

  it('the setting wins over the container; the store never takes more than 60 % of the old space beyond 32 MiB', () => {
    assert.equal(budgetOf(POD, 1024).source, 'setting');
    assert.equal(budgetOf(POD, 1024).limitBytes, 1024 * MIB);
    // 1 GiB leaves the store 399 MiB by the limit, but a 192 MiB old space holds 96 MiB of it.
    assert.equal(mib(budgetOf(POD, 1024).shares.store), 96);
  });

  it('without a container limit, the limit follows the old space, and only the heap is watched', () => {
    const budget = budgetOf({ containerLimitBytes: undefined, oldSpaceBytes: 48 * MIB, heapLimitBytes: 60 * MIB });
    assert.equal(budget.source, 'heap');
    assert.equal(mib(budget.limitBytes), 72 + 64);
    assert.equal(mib(budget.shares.store), 9.6);
    assert.equal(budget.rssHighWaterBytes, Number.MAX_SAFE_INTEGER);
    assert.equal(mib(budget.heapHighWaterBytes), 54);
  });

  it('the container limit as libuv reads it: none when 0 or beyond the host (cgroup v1 reads "unlimited" as 2^63)', () => {
    const host = 24 * 1024 * MIB;
    assert.equal(containerLimitBytes(268_435_456, host), 268_435_456);
    assert.equal(containerLimitBytes(0, host), undefined);
    assert.equal(containerLimitBytes(9_223_372_036_854_771_712, host), undefined);
  });

  it("the old space: node's flag when given (the last one wins), else the heap limit less the young generation", () => {
    assert.equal(oldSpaceBytes(204 * MIB, ['--max-old-space-size=192']), 192 * MIB);
    assert.equal(oldSpaceBytes(204 * MIB, ['--max_old_space_size=100'], '--max-old-space-size=64'), 100 * MIB);
    assert.equal(oldSpaceBytes(112 * MIB, [], '--max-old-space-size=64 --max-semi-space-size=16'), 64 * MIB);
    // 24 GB host: 4,144 MiB of heap, 16 MiB semi-spaces.
    assert.equal(oldSpaceBytes(4_144 * MIB, [], ''), 4_096 * MIB);
    // A 256 MiB cgroup: 259 MiB of heap, semi-spaces of 1/128 of it.
    assert.equal(mib(oldSpaceBytes(259 * MIB, [], '')), 252.9);
  });

  it('refuses a limit that cannot hold the runtime, the headroom and the bodies, naming the setting to change', () => {
    assert.throws(
      () => checkBudgetFits(budgetOf(POD, 96), { limit: 'LIMIT', maxBodyBytes: 'BODY' }),
      (err: unknown) => err instanceof ConfigError && err.setting === 'LIMIT' && /96 MiB, setting/.test(err.message),
    );
    assert.throws(
      () => checkBudgetFits(budgetOf(POD, 'auto', 16 * MIB), { limit: 'LIMIT', maxBodyBytes: 'BODY' }),
      (err: unknown) => err instanceof ConfigError && err.setting === 'BODY',
    );
    checkBudgetFits(budgetOf(POD, 128), { limit: 'LIMIT', maxBodyBytes: 'BODY' });
  });

  it('a store budget is refused when it does not fit the old space or the limit', () => {
    const budget = budgetOf(POD);
    assert.equal(storeMaxBytes(32, budget, 'STORE'), 32 * MIB);
    assert.equal(storeMaxBytes('auto', budget, 'STORE'), budget.shares.store);
    assert.throws(() => storeMaxBytes(170, budget, 'STORE'), /does not fit node's old space \(192 MiB\)/);
    assert.throws(() => storeMaxBytes(150, budget, 'STORE'), /does not fit the memory limit \(256 MiB, container\)/);
  });
});

describe('memory pressure', () => {
  it('sheds past either high-water mark, and takes work again only once both are under the low-water marks', () => {
    const budget = budgetOf(POD);
    let reading: MemoryReading = { rssBytes: 100 * MIB, heapUsedBytes: 50 * MIB };
    const changes: boolean[] = [];
    const pressure = new MemoryPressure(
      budget,
      (overloaded) => changes.push(overloaded),
      () => reading,
    );
    const at = (rssMib: number, heapMib: number) => {
      reading = { rssBytes: rssMib * MIB, heapUsedBytes: heapMib * MIB };
      pressure.sample();
      return pressure.overloaded;
    };
    assert.equal(at(229, 50), false, 'under 90 % of 256 MiB');
    assert.equal(at(231, 50), true, 'RSS past 90 %');
    assert.equal(at(210, 50), true, 'between the marks: still shedding');
    assert.equal(at(200, 50), false, 'under 80 %');
    assert.equal(at(100, 184), true, 'heap in use past 90 % of the heap limit');
    assert.equal(at(100, 170), true, 'between the marks');
    assert.equal(at(100, 160), false);
    assert.deepEqual(changes, [true, false, true, false]);
    assert.equal(Math.round(pressure.ratio * 100), 78, 'heap 160 of 204 MiB');
  });
});
