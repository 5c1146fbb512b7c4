// The kustomize base and overlays, rendered and checked offline: schemas, settings, probes, security.
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { allContainers, deployment, knownSettings, podSpec, resolvePort, sidecar, sidecarEnv } from './support/pod.js';
import { KUSTOMIZATIONS, SIDECAR_CONTAINER, only, render } from './support/render.js';

const REQUIRED = ['SIDECAR_BASE_URL', 'SIDECAR_ENVIRONMENT', 'SIDECAR_USERNAME', 'SIDECAR_PRIVATE_KEY_FILE'];
/** Files the Secret must hold (docs/operations.md: `kubectl create secret generic ... --from-file=<name>=...`). */
const SECRET_FILES = { SIDECAR_PRIVATE_KEY_FILE: 'private-key.pem', SIDECAR_PASSWORD_FILE: 'password' } as const;
const PROBES = { startupProbe: '/startupz', readinessProbe: '/readyz', livenessProbe: '/livez' } as const;

const scratch = mkdtempSync(join(tmpdir(), 'deploy-manifests-'));
after(() => rmSync(scratch, { recursive: true, force: true }));
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
writeFileSync(
  join(scratch, SECRET_FILES.SIDECAR_PRIVATE_KEY_FILE),
  privateKey.export({ type: 'pkcs8', format: 'pem' }),
);
writeFileSync(join(scratch, SECRET_FILES.SIDECAR_PASSWORD_FILE), 'example-password\n');

for (const which of KUSTOMIZATIONS) {
  describe(`deploy/${which}`, () => {
    test('renders, and every object validates against its schema', () => {
      const rendered = render(which);
      const kinds = rendered.ids.map((id) => id.split('/').slice(0, -1).join('/')).sort();
      for (const kind of [
        'apps/v1/Deployment',
        'networking.k8s.io/v1/NetworkPolicy',
        'monitoring.coreos.com/v1/PodMonitor',
        'monitoring.coreos.com/v1/PrometheusRule',
        'v1/ConfigMap',
        'v1/ServiceAccount',
      ]) {
        assert.ok(kinds.includes(kind), `${kind} missing from ${rendered.ids.join(', ')}`);
      }
    });

    test('the sidecar is a native sidecar running `serve`, started before the application', () => {
      const spec = podSpec(render(which));
      assert.equal(spec.initContainers?.[0]?.name, SIDECAR_CONTAINER, 'the sidecar must be the first init container');
      const container = sidecar(render(which));
      assert.equal(container.restartPolicy, 'Always');
      assert.deepEqual(container.args, ['serve']);
      assert.equal(container.command, undefined, 'keep the image ENTRYPOINT (node dist/src/main.js)');
      assert.ok(spec.containers.length >= 1, 'an application container');
    });

    test('every env var set is a known setting and every required setting is set', () => {
      const env = sidecarEnv(render(which));
      const known = knownSettings();
      for (const name of env.keys()) assert.ok(known.has(name), `${name} is not a setting of src/config/schema.ts`);
      for (const name of REQUIRED) assert.ok((env.get(name) ?? '') !== '', `${name} is required`);
      assert.ok(env.has('SIDECAR_PASSWORD_FILE') || env.has('SIDECAR_PASSWORD'), 'SIDECAR_PASSWORD_FILE is required');
      assert.ok(!env.has('SIDECAR_PASSWORD'), 'the password comes from the Secret file, never an env var');
      for (const c of podSpec(render(which)).containers) {
        for (const e of c.env ?? [])
          assert.ok(!e.name.startsWith('SIDECAR_'), `${c.name} sets ${e.name}: sidecar only`);
      }
    });

    test('the sidecar accepts the settings (loadConfig, with the Secret files stand-ins)', () => {
      const rendered = render(which);
      const env = Object.fromEntries(sidecarEnv(rendered));
      const mount = secretMountPath(which);
      for (const [setting, file] of Object.entries(SECRET_FILES)) {
        assert.equal(env[setting], `${mount}/${file}`, `${setting} must name ${file} in the Secret volume`);
        env[setting] = join(scratch, file);
      }
      const config = loadConfig(env);
      assert.equal(config.listen.host, '127.0.0.1', 'the proxy must listen on loopback only');
      assert.equal(config.listen.port, 8080);
      assert.equal(config.admin.port, adminPort(which));
      assert.equal(config.base.protocol, 'https:');
      if (which !== 'base') assert.equal(config.environment, which.replace('overlays/', ''));
      const grace = podSpec(rendered).terminationGracePeriodSeconds ?? 30;
      const sidecarBudgetMs = config.shutdown.drainDelayMs + config.shutdown.maxDelayMs;
      assert.ok(
        grace * 1000 >= sidecarBudgetMs + 15_000,
        `terminationGracePeriodSeconds ${grace}s must exceed drain + max delay (${sidecarBudgetMs} ms) plus time for the app`,
      );
    });

    test('probes hit the admin listener paths on the admin port', () => {
      const container = sidecar(render(which));
      const port = adminPort(which);
      for (const [probe, path] of Object.entries(PROBES)) {
        const get = container[probe as keyof typeof PROBES]?.httpGet;
        assert.ok(get, `${probe} must be an httpGet probe`);
        assert.equal(get.path, path, probe);
        assert.equal(resolvePort(container, get.port), port, `${probe} port`);
        assert.notEqual(get.scheme, 'HTTPS');
      }
      for (const c of podSpec(render(which)).containers) {
        assert.ok(!(c.ports ?? []).some((p) => p.containerPort === 8080), 'the proxy port is never exposed');
      }
    });

    test('security context: non-root, read-only root, no escalation, no capabilities; limits set', () => {
      const spec = podSpec(render(which));
      assert.equal(spec.securityContext?.runAsNonRoot, true);
      assert.equal(spec.securityContext?.seccompProfile?.type, 'RuntimeDefault');
      assert.equal(spec.automountServiceAccountToken, false);
      for (const c of allContainers(spec)) {
        const sc = c.securityContext;
        assert.equal(sc?.runAsNonRoot, true, `${c.name} runAsNonRoot`);
        assert.ok((sc?.runAsUser ?? spec.securityContext?.runAsUser ?? 0) > 0, `${c.name} numeric non-root user`);
        assert.equal(sc?.readOnlyRootFilesystem, true, `${c.name} readOnlyRootFilesystem`);
        assert.equal(sc?.allowPrivilegeEscalation, false, `${c.name} allowPrivilegeEscalation`);
        assert.equal(sc?.privileged ?? false, false, `${c.name} privileged`);
        assert.deepEqual(sc?.capabilities?.drop, ['ALL'], `${c.name} drops all capabilities`);
        assert.equal(sc?.capabilities?.add, undefined, `${c.name} adds no capability`);
        for (const kind of ['requests', 'limits'] as const) {
          for (const resource of ['cpu', 'memory']) {
            assert.ok(c.resources?.[kind]?.[resource] !== undefined, `${c.name} resources.${kind}.${resource}`);
          }
        }
      }
    });

    test('the Secret is mounted as a directory (no subPath), read-only, group-readable only', () => {
      const spec = podSpec(render(which));
      const secretVolumes = (spec.volumes ?? []).filter((v) => v.secret);
      assert.equal(secretVolumes.length, 1);
      const volume = secretVolumes[0];
      assert.equal(volume?.secret?.defaultMode, 0o440);
      for (const c of allContainers(spec)) {
        for (const m of c.volumeMounts ?? []) {
          if (m.name !== volume?.name) continue;
          assert.equal(c.name, SIDECAR_CONTAINER, 'only the sidecar sees the key and password');
          assert.equal(m.subPath, undefined, 'subPath mounts never receive rotated Secrets');
          assert.equal(m.subPathExpr, undefined);
          assert.equal(m.readOnly, true);
        }
      }
    });

    test('NetworkPolicy: the pod reaches only DNS and the gateway (443); only Prometheus reaches the admin port', () => {
      const rendered = render(which);
      const policy = only(rendered.networkPolicies, 'NetworkPolicy').spec;
      const labels = deployment(rendered).spec?.template.metadata?.labels ?? {};
      for (const [k, v] of Object.entries(policy?.podSelector.matchLabels ?? {}))
        assert.equal(labels[k], v, `selects pod label ${k}`);
      assert.deepEqual([...(policy?.policyTypes ?? [])].sort(), ['Egress', 'Ingress']);
      const egressPorts = (policy?.egress ?? []).flatMap((rule) =>
        (rule.ports ?? []).map((p) => `${p.protocol}/${p.port}`),
      );
      assert.deepEqual(egressPorts.sort(), ['TCP/443', 'TCP/53', 'UDP/53']);
      for (const rule of policy?.egress ?? []) {
        assert.ok((rule.to ?? []).length > 0, 'every egress rule names its destination');
        for (const peer of rule.to ?? []) assert.notEqual(peer.ipBlock?.cidr, '0.0.0.0/0', 'no open egress');
      }
      const admin = (policy?.ingress ?? []).filter((r) => (r.ports ?? []).some((p) => p.port === adminPort(which)));
      assert.equal(admin.length, 1, 'one ingress rule for the admin port');
      assert.ok(
        (admin[0]?.from ?? []).every((p) => p.namespaceSelector !== undefined),
        'admin port: Prometheus namespace only',
      );
    });

    test('PodMonitor scrapes /metrics on the sidecar admin port of the example pods', () => {
      const rendered = render(which);
      const monitor = only(rendered.podMonitors, 'PodMonitor').spec;
      const labels = deployment(rendered).spec?.template.metadata?.labels ?? {};
      for (const [k, v] of Object.entries(monitor.selector.matchLabels ?? {}))
        assert.equal(labels[k], v, `selects pod label ${k}`);
      const endpoint = only(monitor.podMetricsEndpoints ?? [], 'podMetricsEndpoint');
      assert.equal(endpoint.path, '/metrics');
      assert.equal(resolvePort(sidecar(rendered), endpoint.port ?? ''), adminPort(which));
    });
  });
}

describe('overlays', () => {
  test('staging and production differ in gateway address, environment, Secret and namespace', () => {
    const [staging, production] = (['overlays/staging', 'overlays/production'] as const).map((o) => {
      const rendered = render(o);
      const env = sidecarEnv(rendered);
      const secret = (podSpec(rendered).volumes ?? []).find((v) => v.secret)?.secret?.secretName;
      return { env, secret, namespace: deployment(rendered).metadata?.namespace };
    });
    assert.equal(staging?.env.get('SIDECAR_ENVIRONMENT'), 'staging');
    assert.equal(production?.env.get('SIDECAR_ENVIRONMENT'), 'production');
    assert.notEqual(staging?.env.get('SIDECAR_BASE_URL'), production?.env.get('SIDECAR_BASE_URL'));
    assert.notEqual(staging?.secret, production?.secret, 'one keypair (Secret) per environment');
    assert.ok(staging?.namespace && production?.namespace && staging.namespace !== production.namespace);
  });
});

function adminPort(which: (typeof KUSTOMIZATIONS)[number]): number {
  const port = Number(sidecarEnv(render(which)).get('SIDECAR_ADMIN_PORT') ?? 9464);
  const declared = resolvePort(sidecar(render(which)), 'admin');
  assert.equal(declared, port, 'container port "admin" equals SIDECAR_ADMIN_PORT');
  return port;
}

function secretMountPath(which: (typeof KUSTOMIZATIONS)[number]): string {
  const spec = podSpec(render(which));
  const volume = only(
    (spec.volumes ?? []).filter((v) => v.secret),
    'secret volume',
  );
  const mount = only(
    (sidecar(render(which)).volumeMounts ?? []).filter((m) => m.name === volume.name),
    'secret mount',
  );
  return mount.mountPath;
}
