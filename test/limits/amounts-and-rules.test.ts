// Exact amounts and the rules file: what an operator writes and what a payload may hold, checked before any payment
// is counted.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatMinorUnits, limitInMinorUnits, parseAmount } from '../../src/limits/amount.js';
import { parseLimitRules } from '../../src/limits/rules.js';

const ROUTES = ['/api/v2/transaction/init', '/api/v2/transfer-out/init'];

const minor = (text: string, exponent = 2): bigint => {
  const parsed = parseAmount(text, exponent);
  if ('invalid' in parsed) throw new Error(`${text}: ${parsed.invalid}`);
  return parsed.minor;
};

describe('amounts are counted exactly, in minor units', () => {
  it('0.1 + 0.2 is exactly 0.30, where floating point says 0.30000000000000004', () => {
    assert.equal(minor('0.1') + minor('0.2'), minor('0.3'));
    assert.equal(formatMinorUnits(minor('0.1') + minor('0.2'), 2), '0.30');
    assert.notEqual(0.1 + 0.2, 0.3);
  });

  it("each currency's ISO 4217 places: 2 for USD, 0 for JPY, 3 for KWD", () => {
    assert.equal(minor('100.50', 2), 10_050n);
    assert.equal(minor('100', 0), 100n);
    assert.equal(minor('1.005', 3), 1_005n);
    assert.equal(formatMinorUnits(1_005n, 3), '1.005');
    assert.equal(formatMinorUnits(5n, 2), '0.05');
  });

  it('huge amounts stay exact past 2^53', () => {
    const huge = '90071992547409931.07';
    assert.equal(minor(huge), 9_007_199_254_740_993_107n);
    assert.equal(formatMinorUnits(minor(huge), 2), huge);
  });

  it('refuses what is not a plain positive decimal: signs, exponents, spaces, leading zeros, zero, too long', () => {
    for (const text of [
      '-5',
      '+5',
      '1e3',
      '1E3',
      ' 1',
      '1 ',
      '01',
      '.5',
      '5.',
      '0',
      '0.00',
      '',
      '1,000.00',
      'NaN',
      '0x10',
    ]) {
      assert.ok('invalid' in parseAmount(text, 2), `${JSON.stringify(text)} refused`);
    }
    assert.ok('invalid' in parseAmount('1'.repeat(41), 2), 'longer than 40 characters');
  });

  it('refuses more places than the currency has, trailing zeros included', () => {
    assert.ok('invalid' in parseAmount('1.005', 2));
    assert.ok('invalid' in parseAmount('1.500', 2));
    assert.ok('invalid' in parseAmount('1.5', 0));
    assert.equal(minor('1.50'), 150n);
  });

  it('a limit is rounded down to the currency: "0.005" USD allows nothing', () => {
    assert.equal(limitInMinorUnits('5000.00', 2), 500_000n);
    assert.equal(limitInMinorUnits('0.009', 2), 0n);
    assert.equal(limitInMinorUnits('1000.5', 0), 1_000n);
  });
});

describe('the rules file', () => {
  const yaml = `
rules:
  - name: withdrawals-usd
    route: /api/v2/transfer-out/init
    currency: USD
    maxAmount: "1000.00"
    windows:
      - { period: 1h, maxTotal: "5000.00" }
      - { period: 24h, maxTotal: "20000.00" }
    maxPerMinute: 60
    mode: enforce
  - name: deposits-any
    route: /api/v2/transaction/init
    amountField: /payment/amount
    windows: [{ period: 30m, maxTotal: "100" }]
    mode: report
minorUnits: { USDT: 6 }
`;

  it('reads the documented shape, with the defaults filled in', () => {
    const { rules, exponentOf } = parseLimitRules(yaml, ROUTES);
    assert.equal(rules.length, 2);
    const [usd, any] = rules;
    assert.equal(usd?.maxAmount, '1000.00');
    assert.deepEqual(
      usd?.windows.map((w) => [w.label, w.periodMs, w.maxTotal ?? w.maxCount]),
      [
        ['1h', 3_600_000, '5000.00'],
        ['24h', 86_400_000, '20000.00'],
        ['per_minute', 60_000, 60],
      ],
    );
    assert.deepEqual(usd?.amountField, ['amount']);
    assert.deepEqual(usd?.currencyField, ['currency']);
    assert.deepEqual(any?.amountField, ['payment', 'amount']);
    assert.equal(any?.currency, undefined);
    assert.equal(any?.mode, 'report');
    assert.equal(exponentOf('USDT'), 6);
    assert.equal(exponentOf('JPY'), 0);
    assert.equal(exponentOf('XYZ'), undefined);
  });

  it('reads JSON too, and a rule without a mode enforces', () => {
    const json = JSON.stringify({ rules: [{ name: 'a', route: ROUTES[1], maxPerMinute: 5 }] });
    assert.equal(parseLimitRules(json, ROUTES).rules[0]?.mode, 'enforce');
  });

  const refusals: Array<[string, string, RegExp]> = [
    [
      'a route that is not signed',
      'rules: [{ name: a, route: /api/v2/transfer-out/inti, maxPerMinute: 1 }]',
      /not a signed route/,
    ],
    [
      'a float where money goes',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, maxAmount: 10.5 }]',
      /in quotes/,
    ],
    [
      'an unknown field (a typo)',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, maxAmout: "1" }]',
      /unknown field "maxAmout"/,
    ],
    ['a rule that limits nothing', 'rules: [{ name: a, route: /api/v2/transfer-out/init }]', /limits nothing/],
    [
      'two rules of one name',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, maxPerMinute: 1 }, { name: a, route: /api/v2/transfer-out/init, maxPerMinute: 2 }]',
      /used twice/,
    ],
    [
      'an unknown currency',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, currency: ABC, maxAmount: "1" }]',
      /not in ISO 4217/,
    ],
    [
      'a period too short',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, windows: [{ period: 30s, maxTotal: "1" }] }]',
      /from 1m to 31d/,
    ],
    [
      'a limit finer than the currency',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, currency: JPY, maxAmount: "0.5" }]',
      /rounds to nothing/,
    ],
    [
      'a mode misspelt',
      'rules: [{ name: a, route: /api/v2/transfer-out/init, maxPerMinute: 1, mode: enforced }]',
      /enforce or report/,
    ],
    [
      'a name that is no label',
      'rules: [{ name: "Big Rule", route: /api/v2/transfer-out/init, maxPerMinute: 1 }]',
      /a-z, 0-9/,
    ],
    ['half a file', 'rules: [{ name: a, route: /api/v2/trans', /syntax error/],
  ];
  for (const [what, text, reason] of refusals) {
    it(`refuses ${what}, saying where`, () => {
      assert.throws(() => parseLimitRules(text, ROUTES), reason);
    });
  }
});
