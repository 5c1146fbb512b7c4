// What a rule reads of a payload: its currency and its amount, exactly, at the rule's JSON pointers.
import { sidecarErrors } from '../errors.js';
import { parseAmount } from './amount.js';
import { CURRENCY_CODE, type LimitRule } from './rules.js';

/** A payment a rule covers, in minor units of its currency. */
export interface Payment {
  readonly currency: string;
  readonly exponent: number;
  readonly amount: bigint;
}

/**
 * The payment as `rule` sees it (amount 0 for a rule that only counts payments); undefined when the rule covers
 * another currency. Throws 400
 * sidecar.limit.amount_invalid (nothing sent) when the payload's currency or amount cannot be counted exactly: the
 * message names the field and the rule, never the value (payloads never leave the sidecar).
 */
export function paymentOf(
  rule: LimitRule,
  payload: unknown,
  exponentOf: (currency: string) => number | undefined,
): Payment | undefined {
  // A rule that only counts payments reads no amount, and a currency only to tell whether the payment is its own.
  const countsOnly = rule.maxAmount === undefined && rule.windows.every((window) => window.maxCount !== undefined);
  if (countsOnly && rule.currency === undefined) return { currency: '', exponent: 0, amount: 0n };
  const currency = fieldAt(payload, rule.currencyField);
  if (typeof currency !== 'string' || !CURRENCY_CODE.test(currency))
    throw invalid(rule, rule.currencyFieldText, 'is missing or not a currency code such as "USD"');
  if (rule.currency !== undefined && currency !== rule.currency) return undefined;
  if (countsOnly) return { currency, exponent: 0, amount: 0n };
  const exponent = exponentOf(currency);
  if (exponent === undefined)
    throw invalid(rule, rule.currencyFieldText, 'names a currency outside ISO 4217 and the rules file');
  const text = fieldAt(payload, rule.amountField);
  if (typeof text !== 'string') throw invalid(rule, rule.amountFieldText, 'is missing or not a JSON string');
  const parsed = parseAmount(text, exponent);
  if ('invalid' in parsed) throw invalid(rule, rule.amountFieldText, parsed.invalid);
  return { currency, exponent, amount: parsed.minor };
}

/** The value at an RFC 6901 pointer (own properties only; array elements by index); undefined when absent. */
function fieldAt(payload: unknown, pointer: readonly string[]): unknown {
  let value = payload;
  for (const token of pointer) {
    if (typeof value !== 'object' || value === null) return undefined;
    if (Array.isArray(value)) {
      if (!/^(0|[1-9][0-9]*)$/.test(token)) return undefined;
      value = value[Number(token)];
    } else {
      if (!Object.hasOwn(value, token)) return undefined;
      value = (value as Record<string, unknown>)[token];
    }
  }
  return value;
}

function invalid(rule: LimitRule, field: string, why: string) {
  return sidecarErrors.limitAmountInvalid(`payload field ${field} ${why} (limit rule "${rule.name}")`);
}
