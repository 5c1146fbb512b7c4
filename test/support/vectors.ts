import { readFileSync } from 'node:fs';

export interface SignatureVector {
  name: string;
  method: string;
  base_url: string;
  request_target: string;
  full_url: string;
  timestamp: string;
  nonce: string;
  payload: string;
  data: string;
  signing_string: string;
  signature: string;
}

const dir = new URL('../vectors/', import.meta.url);

/** The known-answer vectors made by test/vectors/make-vectors.sh with the openssl CLI. */
export const vectors: SignatureVector[] = JSON.parse(
  readFileSync(new URL('vectors.json', dir), 'utf8'),
) as SignatureVector[];
export const vectorPrivateKeyPem = readFileSync(new URL('vector-key.pem', dir), 'utf8');
export const vectorPublicKeyPem = readFileSync(new URL('vector-pub.pem', dir), 'utf8');
