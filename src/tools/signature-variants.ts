import { canonicalFullUrl, type CanonicalUrl } from './full-url.js';

/** Parts of a signing string as a vendor's signer may have (mis)built them. */
export interface SigningInputs {
  readonly method: string;
  readonly url: CanonicalUrl;
  readonly timestamp: string;
  readonly nonce: string;
  readonly data: string;
  readonly rawBody: string;
}

export interface Variant {
  /** The rule of spec 5.2 the signer broke if this variant verifies. */
  readonly rule: string;
  readonly signingString: string;
}

function join(method: string, url: string, i: SigningInputs, data = i.data): string {
  return `${method}.${url}.${i.timestamp}.${i.nonce}.${data}`;
}

function defaultPort(protocol: string): string {
  return protocol === 'https:' ? '443' : '80';
}

/** Other URLs a signer might have put in FULL_URL, each named after the rule it breaks. */
function urlVariants(u: CanonicalUrl): { rule: string; url: string }[] {
  const origin = new URL(u.url);
  const host = origin.host;
  const query = u.query === '' ? '' : `?${u.query}`;
  const other = u.protocol === 'https:' ? 'http:' : 'https:';
  const togglePath = u.path.endsWith('/') ? u.path.replace(/\/+$/, '') : `${u.path}/`;
  const list = [
    {
      rule: `default port written out (":${defaultPort(u.protocol)}" must be omitted)`,
      url: `${u.protocol}//${origin.hostname}:${defaultPort(u.protocol)}${u.path}${query}`,
    },
    {
      rule: 'host or port not canonical (host must be lowercase, default port omitted)',
      url: `${u.protocol}//${u.rawAuthority}${u.path}${query}`,
    },
    {
      rule: `scheme ${other.slice(0, -1)} signed but ${u.protocol.slice(0, -1)} posted (base address differs between signing and sending)`,
      url: canonicalFullUrl(`${other}//${u.rawAuthority}${u.path}${query}`).url,
    },
    {
      rule: 'trailing "/" differs (the path is signed exactly as posted)',
      url: `${u.protocol}//${host}${togglePath}${query}`,
    },
    { rule: 'origin left out (FULL_URL must be the complete URL)', url: `${u.path}${query}` },
  ];
  if (u.query !== '')
    list.push({
      rule: 'query left out (a non-empty query is signed with its "?")',
      url: `${u.protocol}//${host}${u.path}`,
    });
  if (u.query === '')
    list.push({ rule: 'empty "?" signed (an empty query is omitted with its "?")', url: `${u.url}?` });
  return list.filter((v) => v.url !== u.url);
}

/** Every near miss worth trying when the signature does not verify as spec 5.2 builds it. */
export function signingVariants(i: SigningInputs): Variant[] {
  const variants: Variant[] = urlVariants(i.url).map((v) => ({
    rule: v.rule,
    signingString: join(i.method, v.url, i),
  }));
  if (i.method !== i.method.toLowerCase()) {
    variants.push({ rule: 'method not uppercase', signingString: join(i.method.toLowerCase(), i.url.url, i) });
  }
  const payload = Buffer.from(i.data, 'base64').toString('utf8');
  variants.push({
    rule: 'decoded payload signed instead of the base64 data string',
    signingString: join(i.method, i.url.url, i, payload),
  });
  variants.push({
    rule: 'whole body signed instead of the data string',
    signingString: join(i.method, i.url.url, i, i.rawBody.trim()),
  });
  return variants;
}
