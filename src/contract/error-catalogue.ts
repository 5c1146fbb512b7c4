// The error catalogue as a caller sees it: every code the sidecar can answer with, each with every status it comes
// with, its `retryable` flag and its message, read off the factories of src/errors.ts (never listed by hand).
import { SETTINGS } from '../config/schema.js';
import { sidecarErrors, type SidecarError, type SidecarErrorCode, type SidecarErrorDetails } from '../errors.js';

type Factories = typeof sidecarErrors;
type FactoryName = keyof Factories;

/**
 * Factories whose arguments shape the answer (its status or message): each needs its sample arguments below, one set
 * per answer it can make. A factory taking nothing, or only a cause (never sent to the caller), is called bare, so a
 * code added to the catalogue appears in the document by itself; one taking anything else fails the typecheck here
 * until it is given its samples.
 */
type ShapedByArguments = {
  [K in FactoryName]: CalledBare<Parameters<Factories[K]>> extends true ? never : K;
}[FactoryName];
type CalledBare<P> = P extends [] ? true : P extends [(infer Only)?] ? (unknown extends Only ? true : false) : false;

/** The answers of the factories of ShapedByArguments. */
function shapedAnswers(maxBodyBytes: number): { readonly [K in ShapedByArguments]: readonly SidecarError[] } {
  return {
    methodNotAllowed: [sidecarErrors.methodNotAllowed('POST')],
    tooLarge: [sidecarErrors.tooLarge(maxBodyBytes)],
    outcomeUnknown: [sidecarErrors.outcomeUnknown(502, undefined), sidecarErrors.outcomeUnknown(504, undefined)],
    limitExceeded: [sidecarErrors.limitExceeded('withdrawals-usd', '24h')],
    limitAmountInvalid: [
      sidecarErrors.limitAmountInvalid('payload field /amount is not a plain positive decimal such as "100.50"'),
    ],
  };
}

/** One code of the catalogue as the caller sees it: every status it comes with. */
export interface CatalogueEntry {
  readonly code: SidecarErrorCode;
  readonly statuses: readonly number[];
  readonly retryable: boolean;
  /** The message it is sent with (with this sidecar's values, where the message carries one). */
  readonly message: string;
  /** The fields its body carries besides code, message and retryable (sidecar.limit.exceeded: rule, window). */
  readonly details: readonly (keyof SidecarErrorDetails)[];
}

/** Every code the sidecar can answer with, from its factories (src/errors.ts), in catalogue order. */
export function errorCatalogue(maxBodyBytes: number = SETTINGS.maxBodyBytes.default): readonly CatalogueEntry[] {
  const shaped: Partial<Record<FactoryName, readonly SidecarError[]>> = shapedAnswers(maxBodyBytes);
  const byCode = new Map<SidecarErrorCode, CatalogueEntry>();
  for (const name of Object.keys(sidecarErrors) as FactoryName[]) {
    const answers = shaped[name] ?? [(sidecarErrors[name] as (cause?: unknown) => SidecarError)(undefined)];
    for (const { code, status, retryable, message, details } of answers) {
      const known = byCode.get(code);
      if (known && known.retryable !== retryable) throw new Error(`${code}: retryable both ways in the catalogue`);
      const statuses = [...(known?.statuses ?? []), status].filter((s, i, all) => all.indexOf(s) === i);
      const fields = Object.keys(details ?? {}) as (keyof SidecarErrorDetails)[];
      byCode.set(code, { code, statuses, retryable, message: known?.message ?? message, details: fields });
    }
  }
  return [...byCode.values()];
}
