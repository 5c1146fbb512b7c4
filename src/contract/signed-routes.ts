// What the contract says of each signed route the schema ships: its summary, the payload it takes (spec 2.3, 2.4)
// and what its success answer is known to contain. Only what the spec shows is declared; the gateway decides the
// rest, and its refusals come back unchanged. A configured route not listed here takes any JSON object.

type Schema = Record<string, unknown>;

export interface SignedRouteContract {
  readonly summary: string;
  /** What the route does at the gateway (the operation's description starts with it). */
  readonly description: string;
  /** Its payload's schema, named in components.schemas. */
  readonly payload: { readonly name: string; readonly schema: Schema };
  /** Named examples of the payload (the request body's `examples`; the schema's first as its own). */
  readonly examples?: Readonly<Record<string, { readonly summary: string; readonly value: Schema }>>;
  /** The fields its success answer is known to contain, beside the gateway's own. */
  readonly answerProperties?: Schema;
}

/** A deposit as the spec shows one (2.3): every field it names, all strings. */
export const DEPOSIT_EXAMPLE = {
  amount: '100.50',
  currency: 'USD',
  gateway: 'card',
  user_id: 'u-42',
  invoice_no: 'INV-1001',
} as const;

const deposit: SignedRouteContract = {
  summary: 'Initiate a deposit',
  description:
    "The gateway's deposit init (spec 4.2): the body is the deposit payload; the answer contains `transaction_link`, the address the customer is sent to.",
  payload: {
    name: 'DepositPayload',
    schema: {
      type: 'object',
      description:
        'The deposit payload (spec 2.3): the fields the spec names, all JSON strings. The spec shows no required flags, formats or allowed values of `currency` and `gateway`, so none are declared: the gateway decides, and its refusal comes back unchanged. Further fields are sent as they are.',
      properties: {
        amount: {
          type: 'string',
          pattern: '^[0-9]+(\\.[0-9]+)?$',
          description: 'A decimal written as a string.',
          examples: ['100.50'],
        },
        currency: { type: 'string', examples: ['USD'] },
        gateway: { type: 'string', examples: ['card'] },
        user_id: { type: 'string', description: "Your customer's id.", examples: ['u-42'] },
        invoice_no: { type: 'string', description: 'Your order number.', examples: ['INV-1001'] },
      },
      additionalProperties: true,
      examples: [DEPOSIT_EXAMPLE],
    },
  },
  examples: { deposit: { summary: 'A card deposit of 100.50 USD', value: DEPOSIT_EXAMPLE } },
  answerProperties: {
    transaction_link: { type: 'string', description: 'Where the customer completes the payment.' },
  },
};

const withdrawal: SignedRouteContract = {
  summary: 'Initiate a withdrawal',
  description: "The gateway's withdrawal init (spec 4.3): the body is the withdrawal payload.",
  payload: {
    name: 'WithdrawalPayload',
    schema: {
      type: 'object',
      description:
        'The withdrawal payload (spec 2.4). The spec does not show its fields, so none are declared: any JSON object, sent as it is; the gateway decides.',
      additionalProperties: true,
    },
  },
};

/** The signed routes the schema ships (SIDECAR_SIGNED_ROUTES' default), described. */
export const SIGNED_ROUTES: Readonly<Record<string, SignedRouteContract>> = {
  '/api/v2/transaction/init': deposit,
  '/api/v2/transfer-out/init': withdrawal,
};

/** A configured route the contract does not know: any JSON object, the gateway's answer as it is. */
export function unknownRoute(route: string): SignedRouteContract {
  return {
    summary: `Signed POST ${route}`,
    description: `Signed and sent to the gateway's ${route}; its answer comes back unchanged.`,
    payload: {
      name: 'Payload',
      schema: {
        type: 'object',
        description: "The gateway's payload as plain JSON: any JSON object.",
        additionalProperties: true,
      },
    },
  };
}
