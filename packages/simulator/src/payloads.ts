// Payload rules. Spec 2.3 names the deposit fields and says they are JSON strings with `amount` a decimal string;
// required flags and formats are not shown, so the choices below are the simulator's documented assumptions.
import { SimError } from './errors.js';

export interface PaymentFields {
  readonly amount: string;
  readonly currency: string;
  readonly userId: string;
  readonly invoiceNo: string;
  readonly gateway: string | undefined;
  /** Every other string field the vendor sent, kept for the control API (e.g. withdrawal account details). */
  readonly extra: Readonly<Record<string, string>>;
}

/** A positive decimal, no sign, no exponent, no leading zeros, at most 8 fraction digits ("100.50", "5"). */
const AMOUNT = /^(?:0|[1-9]\d{0,17})(?:\.\d{1,8})?$/;
const CURRENCY = /^[A-Z]{3}$/;
const MAX_FIELD_LENGTH = 256;

const COMMON_REQUIRED = ['amount', 'currency', 'user_id', 'invoice_no'] as const;
/** Withdrawal-only optional fields (assumption): where the money goes. */
const WITHDRAWAL_OPTIONAL = ['gateway', 'account_number', 'account_name', 'bank_code'] as const;
const DEPOSIT_OPTIONAL = ['gateway'] as const;

export function validateDeposit(payload: Record<string, unknown>): PaymentFields {
  return validate(payload, DEPOSIT_OPTIONAL);
}

export function validateWithdrawal(payload: Record<string, unknown>): PaymentFields {
  return validate(payload, WITHDRAWAL_OPTIONAL);
}

function validate(payload: Record<string, unknown>, optional: readonly string[]): PaymentFields {
  for (const name of COMMON_REQUIRED) {
    if (!(name in payload)) throw fieldError('payload.field.missing', name, 'is required');
  }
  for (const name of [...COMMON_REQUIRED, ...optional]) {
    if (name in payload) requireString(payload, name);
  }
  const amount = payload.amount as string;
  if (!AMOUNT.test(amount) || !/[1-9]/.test(amount)) {
    throw fieldError('payload.field.invalid', 'amount', 'must be a positive decimal string such as "100.50"');
  }
  if (!CURRENCY.test(payload.currency as string)) {
    throw fieldError('payload.field.invalid', 'currency', 'must be a three-letter uppercase code such as "USD"');
  }
  const extra: Record<string, string> = {};
  for (const [key, value] of Object.entries(payload)) {
    if (typeof value === 'string' && !(COMMON_REQUIRED as readonly string[]).includes(key)) extra[key] = value;
  }
  return {
    amount,
    currency: payload.currency as string,
    userId: payload.user_id as string,
    invoiceNo: payload.invoice_no as string,
    gateway: typeof payload.gateway === 'string' ? payload.gateway : undefined,
    extra,
  };
}

function requireString(payload: Record<string, unknown>, name: string): void {
  const value = payload[name];
  if (typeof value !== 'string') {
    throw fieldError('payload.field.invalid', name, `must be a JSON string, got ${jsonType(value)}`);
  }
  if (value.trim() === '') throw fieldError('payload.field.invalid', name, 'must not be empty');
  if (value.length > MAX_FIELD_LENGTH) {
    throw fieldError('payload.field.invalid', name, `must be at most ${MAX_FIELD_LENGTH} characters`);
  }
}

function jsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function fieldError(code: string, field: string, why: string): SimError {
  return new SimError(400, code, `payload field "${field}" ${why}`, { field });
}
