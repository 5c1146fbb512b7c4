// Exact money: amounts are decimal strings (spec 2.3), counted as integer minor units of their currency (ISO 4217's
// exponent: 2 for USD, 0 for JPY, 3 for KWD) in BigInt. No floating point anywhere: 0.1 + 0.2 is 30 cents.

/** A plain positive decimal as people write money: digits, an optional point and fraction; no sign, no exponent. */
const PLAIN_DECIMAL = /^(0|[1-9][0-9]*)(?:\.([0-9]+))?$/;
/** Longer than any real amount: a bound on the work a hostile payload can ask for. */
const MAX_AMOUNT_CHARACTERS = 40;

/** An amount in minor units, or why its text is not one. */
export type ParsedAmount = { readonly minor: bigint } | { readonly invalid: string };

/**
 * A payment's amount in minor units of a currency with `exponent` places: "100.50" with 2 is 10050n. Refused: not
 * a plain positive decimal ("-5", "1e3", "+1", " 1", "01", ".5", "5."), zero, or more places than the currency has
 * ("1.005" in USD: not a trailing zero either, "1.50" is fine, "1.500" is not: the payload says more than money can).
 */
export function parseAmount(text: string, exponent: number): ParsedAmount {
  if (text.length > MAX_AMOUNT_CHARACTERS) return { invalid: `is longer than ${MAX_AMOUNT_CHARACTERS} characters` };
  const match = PLAIN_DECIMAL.exec(text);
  if (match === null) return { invalid: 'is not a plain positive decimal such as "100.50"' };
  const whole = match[1] ?? '0';
  const fraction = match[2] ?? '';
  if (fraction.length > exponent) return { invalid: `has more than ${exponent} decimal places for its currency` };
  const minor = BigInt(whole + fraction.padEnd(exponent, '0'));
  if (minor === 0n) return { invalid: 'is zero' };
  return { minor };
}

/**
 * A limit written in the rules file ("5000.00") in minor units of a currency with `exponent` places, rounded down:
 * a limit of "0.005" USD allows nothing rather than a cent. Throws on text that is not a plain decimal.
 */
export function limitInMinorUnits(text: string, exponent: number): bigint {
  const match = PLAIN_DECIMAL.exec(text);
  if (match === null || text.length > MAX_AMOUNT_CHARACTERS)
    throw new Error(`"${text}" is not a plain decimal such as "5000.00"`);
  const fraction = (match[2] ?? '').slice(0, exponent).padEnd(exponent, '0');
  return BigInt((match[1] ?? '0') + fraction);
}

/** Minor units as the decimal people read: 10050n with 2 places is "100.50". */
export function formatMinorUnits(minor: bigint, exponent: number): string {
  const negative = minor < 0n;
  const digits = (negative ? -minor : minor).toString().padStart(exponent + 1, '0');
  const text = exponent === 0 ? digits : `${digits.slice(0, -exponent)}.${digits.slice(-exponent)}`;
  return negative ? `-${text}` : text;
}
