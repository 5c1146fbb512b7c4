// deploy/components/pkcs11/network-policy: the egress a PKCS#11 module needs (a cloud KMS's API or a network HSM, and
// GKE's metadata server for kmsp11's Workload Identity), added to the sidecar's policy as the component's comments tell
// operators to add it, in each environment's network-policy overlay.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, test } from 'node:test';
import { DEPLOY_DIR, only, renderDir } from './support/render.js';

const scratch = mkdtempSync(join(tmpdir(), 'pkcs11-policy-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The sidecar's egress rules in `env`'s network-policy overlay with the component, as `protocol/port` per rule. */
function egressWithComponent(env: 'staging' | 'production') {
  const dir = join(scratch, env);
  mkdirSync(dir, { recursive: true });
  const up = relative(dir, DEPLOY_DIR);
  writeFileSync(
    join(dir, 'kustomization.yaml'),
    [
      'apiVersion: kustomize.config.k8s.io/v1beta1',
      'kind: Kustomization',
      `resources: ['${up}/overlays/${env}/network-policy']`,
      `components: ['${up}/components/pkcs11/network-policy']`,
      '',
    ].join('\n'),
  );
  const rendered = renderDir(dir, `overlays/${env}/network-policy + components/pkcs11/network-policy`);
  const policy = only(
    rendered.networkPolicies.filter((p) => p.metadata?.name === 'signing-sidecar'),
    'NetworkPolicy signing-sidecar',
  );
  return (policy.spec?.egress ?? []).map((rule) => ({
    ports: (rule.ports ?? []).map((p) => `${p.protocol}/${p.port}`).sort(),
    cidrs: (rule.to ?? []).map((peer) => peer.ipBlock?.cidr),
  }));
}

describe('deploy/components/pkcs11/network-policy', () => {
  for (const env of ['staging', 'production'] as const) {
    test(`${env}: adds the key's service and the metadata server, keeps DNS and the gateway, opens nothing else`, () => {
      const rules = egressWithComponent(env);
      assert.deepEqual(
        rules.flatMap((rule) => rule.ports).sort(),
        ['TCP/443', 'TCP/443', 'TCP/53', 'TCP/80', 'UDP/53'],
        'DNS, the gateway, the KMS or HSM, the metadata server',
      );
      const metadata = only(
        rules.filter((rule) => rule.ports.includes('TCP/80')),
        'the rule to the metadata server',
      );
      assert.deepEqual(metadata.cidrs, ['169.254.169.254/32'], 'the metadata server only');
      for (const rule of rules) {
        for (const cidr of rule.cidrs) assert.notEqual(cidr, '0.0.0.0/0', 'no open egress');
      }
    });
  }
});
