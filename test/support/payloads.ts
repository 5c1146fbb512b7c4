// The one deposit payload the tests send (spec 2.3 field names, every value a string), with overrides per test.

export const DEPOSIT: Readonly<Record<string, string>> = {
  amount: '100.50',
  currency: 'USD',
  gateway: 'card',
  user_id: 'u1',
  invoice_no: 'inv-1',
};

/** The deposit payload with some fields replaced or added. */
export function deposit(overrides: Readonly<Record<string, unknown>> = {}): Record<string, unknown> {
  return { ...DEPOSIT, ...overrides };
}

/** The deposit payload as the JSON text a client sends. */
export function depositJson(overrides: Readonly<Record<string, unknown>> = {}): string {
  return JSON.stringify(deposit(overrides));
}
