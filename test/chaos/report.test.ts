// The chaos report as a reader opens it: in headless Chromium (Debian's, driven by playwright-core), from a file,
// with no network. The timeline is an SVG drawn at report time, and every fault of the history is a band on it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { check } from '../../chaos/checker.js';
import type { HistoryEvent } from '../../chaos/history.js';
import { summarize, writeReport } from '../../chaos/report.js';
import { scratchDir } from '../support/scratch.js';

/** Debian's package, which `npm test` installs as root (scripts/test-prerequisites.sh); CHROMIUM_PATH overrides. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const STEP_MS = 30_000;

/** 20 s of payments, one in fifty unknown, under three faults (one of them instant). */
function history(): HistoryEvent[] {
  const events: HistoryEvent[] = [{ t: 0, type: 'run', seed: 42, duration_s: 20, replicas: 3, callers: 16 }];
  for (let i = 0; i < 400; i++) {
    const t = i * 50;
    const finalRound = i === 399 ? { final_round: true } : {};
    const attempt = { process: i % 16, invoice_no: `inv-${i}`, key: `k-${i}`, replica: i % 3, ...finalRound };
    events.push({ t, type: 'invoke', op: 'deposit', ...attempt });
    events.push(
      i % 50 === 7
        ? { t: t + 40, type: 'info', status: 0, latency_ms: 40, ...attempt }
        : { t: t + 10, type: 'ok', status: 200, transaction_id: `tx-${i}`, latency_ms: 10 + (i % 13), ...attempt },
    );
    events.push({ t: 21_000, type: 'ledger', transaction_id: `tx-${i}`, invoice_no: `inv-${i}`, status: 'PENDING' });
  }
  events.push({ t: 9_000, type: 'fault', kind: 'redis-primary-kill', start: 3_000, end: 9_000, detail: 'port 1' });
  events.push({ t: 12_000, type: 'fault', kind: 'replica-kill', start: 5_000, end: 12_000, detail: 'replica 2' });
  events.push({ t: 15_000, type: 'fault', kind: 'password-rotation', start: 15_000, end: 15_000 });
  events.push({ t: 20_000, type: 'logins', password: 1, refresh: 0 });
  events.push({
    t: 20_500,
    type: 'liveness',
    healed_at: 15_000,
    replicas_ready_at: 15_100,
    final_round_done_at: 15_200,
    inbox_drained_at: 15_300,
  });
  return events;
}

describe('chaos report', () => {
  it('renders offline in Chromium: the timeline SVG, a band for each fault, the figures', async () => {
    const dir = scratchDir('chaos-report-');
    const events = history();
    const summary = summarize(events, check(events));
    await writeReport(dir, events, summary);
    assert.deepEqual(JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')), summary);
    assert.equal(summary.operations, 400);
    assert.equal(summary.info, 8);
    // Per kind, the answers given while it was on: 3-9 s holds attempts 60 to 180, two of them unanswered.
    assert.deepEqual(
      {
        answers: summary.by_fault['redis-primary-kill']?.answers,
        ok: summary.by_fault['redis-primary-kill']?.ok,
        noAnswer: summary.by_fault['redis-primary-kill']?.no_answer,
      },
      { answers: 120, ok: 118, noAnswer: 2 },
    );

    const args = process.getuid?.() === 0 ? ['--no-sandbox'] : [];
    const browser = await chromium.launch({ executablePath: CHROMIUM, args, timeout: STEP_MS });
    try {
      const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
      const requests: string[] = [];
      page.on('request', (request) => requests.push(request.url()));
      await page.goto(pathToFileURL(join(dir, 'report.html')).href, { timeout: STEP_MS });
      const svg = page.locator('figure#timeline svg');
      assert.equal(await svg.count(), 1, 'the timeline is an inline SVG');
      const box = await svg.boundingBox();
      assert.ok(
        box !== null && box.width > 800 && box.height > 300,
        `drawn at a readable size: ${JSON.stringify(box)}`,
      );
      // Vega labels each bar for assistive technology with its fields: one per fault, named by kind.
      const bars = await page.locator('.concat_0_marks path[aria-roledescription="bar"]').all();
      const bands = await Promise.all(bars.map(async (bar) => (await bar.getAttribute('aria-label')) ?? ''));
      assert.equal(bands.length, 3, bands.join('\n'));
      for (const kind of ['redis-primary-kill', 'replica-kill', 'password-rotation']) {
        assert.ok(
          bands.some((label) => label.includes(`kind: ${kind}`)),
          `a band for ${kind}`,
        );
      }
      const answerBars = await page.locator('.concat_1_marks path').count();
      assert.ok(answerBars >= 20, `answers per second drawn (${answerBars} bars)`);
      assert.equal(await page.locator('.concat_2_marks path').count(), 3, 'p50, p95 and p99 lines');
      assert.match(await page.locator('body').innerText(), /No violations\./);
      assert.deepEqual(
        requests.filter((url) => !url.startsWith('file:')),
        [],
        'the page loads nothing from the network',
      );
    } finally {
      await browser.close();
    }
  });
});
