// HTTPS for the simulator, so the sidecar's real TLS path (SIDECAR_UPSTREAM_CA_FILE) is exercised.
// The generated chain is a throwaway CA plus a leaf for localhost/127.0.0.1/::1 signed by it: clients trust the
// CA file exactly as they would trust a private corporate CA, rather than pinning a self-signed leaf.
import { isIP } from 'node:net';
import { generate } from 'selfsigned';

export interface TlsMaterial {
  readonly certPem: string;
  readonly keyPem: string;
  /** The PEM a client must trust; undefined when the caller supplied its own certificate without a CA. */
  readonly caPem: string | undefined;
}

const VALIDITY_DAYS = 30;

export async function generateTlsMaterial(extraHost?: string): Promise<TlsMaterial> {
  const notBeforeDate = new Date(Date.now() - 60_000);
  const notAfterDate = new Date(notBeforeDate.getTime() + VALIDITY_DAYS * 86_400_000);
  const ca = await generate([{ name: 'commonName', value: 'signing-sidecar simulator test CA' }], {
    keySize: 2048,
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    ],
  });
  const leaf = await generate([{ name: 'commonName', value: 'localhost' }], {
    keySize: 2048,
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    ca: { key: ca.private, cert: ca.cert },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: altNames(extraHost) },
    ],
  });
  return { certPem: leaf.cert, keyPem: leaf.private, caPem: ca.cert };
}

function altNames(extraHost: string | undefined): { type: 2 | 7; value?: string; ip?: string }[] {
  const names: { type: 2 | 7; value?: string; ip?: string }[] = [
    { type: 2, value: 'localhost' },
    { type: 7, ip: '127.0.0.1' },
    { type: 7, ip: '::1' },
  ];
  const host = extraHost?.replace(/^\[|\]$/g, '');
  if (host === undefined || ['localhost', '127.0.0.1', '::1'].includes(host)) return names;
  names.push(isIP(host) === 0 ? { type: 2, value: host } : { type: 7, ip: host });
  return names;
}
