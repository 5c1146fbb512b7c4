// The kustomize base and overlays, rendered and checked offline: schemas, settings, probes, security.
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, test } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { allContainers, deployment, knownSettings, podSpec, resolvePort, sidecar, sidecarEnv } from './support/pod.js';
import type { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import {
  DEPLOY_DIR,
  KUSTOMIZATIONS,
  REPO_ROOT,
  SIDECAR_CONTAINER,
  only,
  render,
  renderDir,
  type Rendered,
} from './support/render.js';

const REQUIRED = ['SIDECAR_BASE_URL', 'SIDECAR_ENVIRONMENT', 'SIDECAR_USERNAME', 'SIDECAR_PRIVATE_KEY_FILE'];
/** Files the Secret must hold (docs/operations.md: `kubectl create secret generic ... --from-file=<name>=...`). */
const SECRET_FILES = {
  SIDECAR_PRIVATE_KEY_FILE: 'private-key.pem',
  SIDECAR_PASSWORD_FILE: 'password',
  // The gateway's postback public key(s), shipped in the same Secret (docs/postbacks.md).
  SIDECAR_POSTBACK_PUBLIC_KEY_FILE: 'gateway-postback.pub.pem',
} as const;
/**
 * The secret that signs what the sidecar forwards to the application (docs/postbacks.md): a Secret of its own, shared
 * by the sidecar (signs) and the application (verifies), which never sees the credentials.
 */
const FORWARD_SECRET = {
  setting: 'SIDECAR_POSTBACK_FORWARD_SECRET_FILE',
  volume: 'postback-forward-secret',
  file: 'secret',
} as const;
/** The postback receiver's port (docs/postbacks.md): on the container, behind its Service, in the policy. */
const POSTBACK_PORT = 8081;
const PROBES = { startupProbe: '/startupz', readinessProbe: '/readyz', livenessProbe: '/livez' } as const;

const scratch = mkdtempSync(join(tmpdir(), 'deploy-manifests-'));
after(() => rmSync(scratch, { recursive: true, force: true }));
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
writeFileSync(
  join(scratch, SECRET_FILES.SIDECAR_PRIVATE_KEY_FILE),
  privateKey.export({ type: 'pkcs8', format: 'pem' }),
);
writeFileSync(join(scratch, SECRET_FILES.SIDECAR_PASSWORD_FILE), 'example-password\n');
writeFileSync(
  join(scratch, SECRET_FILES.SIDECAR_POSTBACK_PUBLIC_KEY_FILE),
  generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({ type: 'spki', format: 'pem' }),
);
// As the overlays' comment makes it: whsec_ and `openssl rand -base64 32`.
writeFileSync(join(scratch, FORWARD_SECRET.file), `whsec_${randomBytes(32).toString('base64')}`);

/** The sidecar's settings with every Secret file path replaced by a stand-in in `scratch`. */
function withStandIns(env: Record<string, string | undefined>): Record<string, string | undefined> {
  const standIns = Object.entries(SECRET_FILES).map(([setting, file]): [string, string] => [
    setting,
    join(scratch, file),
  ]);
  return { ...env, ...Object.fromEntries(standIns), [FORWARD_SECRET.setting]: join(scratch, FORWARD_SECRET.file) };
}

for (const which of KUSTOMIZATIONS) {
  describe(`deploy/${which}`, () => {
    test('renders, and every object validates against its schema', () => {
      const rendered = render(which);
      const kinds = rendered.ids.map((id) => id.split('/').slice(0, -1).join('/')).sort();
      for (const kind of [
        'apps/v1/Deployment',
        'monitoring.coreos.com/v1/PodMonitor',
        'monitoring.coreos.com/v1/PrometheusRule',
        'v1/ConfigMap',
        'v1/Service',
        'v1/ServiceAccount',
      ]) {
        assert.ok(kinds.includes(kind), `${kind} missing from ${rendered.ids.join(', ')}`);
      }
      // A NetworkPolicy limits the whole pod: applying the workload must never cut the application's own traffic.
      assert.equal(rendered.networkPolicies.length, 0, 'the network policies are opt-in, applied on their own');
    });

    test('the sidecar is a native sidecar running `serve`, started before the application', () => {
      const spec = podSpec(render(which));
      assert.equal(spec.initContainers?.[0]?.name, SIDECAR_CONTAINER, 'the sidecar must be the first init container');
      const container = sidecar(render(which));
      assert.equal(container.restartPolicy, 'Always');
      assert.deepEqual(container.args, ['serve']);
      assert.equal(container.command, undefined, 'keep the image ENTRYPOINT (node dist/image/main.js)');
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
      }
      const config = loadConfig(withStandIns(env));
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

    test('the postback receiver: its port on the sidecar, a Service for the Ingress on that port only', () => {
      const rendered = render(which);
      const env = sidecarEnv(rendered);
      const container = sidecar(rendered);
      assert.equal(Number(env.get('SIDECAR_POSTBACK_LISTEN_PORT')), POSTBACK_PORT);
      assert.equal(resolvePort(container, 'postbacks'), POSTBACK_PORT, 'a port named postbacks on the sidecar');
      const service = only(
        rendered.services.filter((s) => s.metadata?.name === 'payments-api-postbacks'),
        'Service payments-api-postbacks',
      );
      const labels = deployment(rendered).spec?.template.metadata?.labels ?? {};
      for (const [k, v] of Object.entries(service.spec?.selector ?? {})) assert.equal(labels[k], v, `selects ${k}`);
      assert.deepEqual(
        (service.spec?.ports ?? []).map((p) => [p.port, p.targetPort]),
        [[POSTBACK_PORT, 'postbacks']],
        'the receiver only: never the proxy or the admin port',
      );
      assert.equal(service.spec?.type ?? 'ClusterIP', 'ClusterIP', 'reached through the Ingress, which terminates TLS');
      const config = loadConfig(withStandIns(Object.fromEntries(env)));
      assert.equal(config.postback?.publicUrl.protocol, 'https:', 'the public URL is https (TLS at the Ingress)');
      assert.match(config.postback?.forwardUrl ?? '', /^http:\/\/127\.0\.0\.1:3000\//, "the application's port");
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

    test("the sidecar runs as its own user, the image's: no other container of the pod has its UID", () => {
      const spec = podSpec(render(which));
      const own = sidecar(render(which)).securityContext;
      const image = /^USER (\d+):(\d+)$/m.exec(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'));
      assert.deepEqual([own?.runAsUser, own?.runAsGroup], [Number(image?.[1]), Number(image?.[2])], 'image USER');
      // The Secret's files are group-owned by fsGroup (0440): the sidecar reads them as its own group.
      assert.equal(spec.securityContext?.fsGroup, own?.runAsGroup, 'fsGroup is the sidecar group');
      for (const c of allContainers(spec)) {
        if (c.name === SIDECAR_CONTAINER) continue;
        // Unset, a container runs as its image's USER, which this test cannot see: each one states its own.
        const uid = c.securityContext?.runAsUser ?? spec.securityContext?.runAsUser;
        assert.ok(uid !== undefined, `${c.name} states its runAsUser`);
        assert.notEqual(uid, own?.runAsUser, `${c.name} runs as the sidecar's user`);
        const gid = c.securityContext?.runAsGroup ?? spec.securityContext?.runAsGroup;
        assert.notEqual(gid, own?.runAsGroup, `${c.name} runs in the sidecar's group`);
      }
    });

    test('the sidecar has no writable volume: it writes nothing (the image test traces it)', () => {
      const spec = podSpec(render(which));
      for (const mount of sidecar(render(which)).volumeMounts ?? []) {
        assert.equal(mount.readOnly, true, `${mount.name} must be read-only`);
        const volume = (spec.volumes ?? []).find((v) => v.name === mount.name);
        assert.ok(volume?.secret, `${mount.name}: the sidecar mounts its Secret only`);
      }
    });

    test('CPU and memory are sized from the bench figures (deploy/sizing.json) at the expected rate', () => {
      const { requests, limits } = sidecar(render(which)).resources ?? {};
      const figures = sizing();
      // Expected rate / signed requests per CPU second, x3 for bursts (docs/operations.md, "Sizing").
      const busy = figures.expectedPaymentsPerSecond / figures.benchMinThroughputPerCore;
      assert.ok(cpuCores(requests?.cpu) >= 3 * busy, `cpu request ${String(requests?.cpu)} < 3 x ${busy.toFixed(3)}`);
      // No CPU limit, or at least one core: a limit near the request throttles bursts of signatures.
      if (limits?.cpu !== undefined) assert.ok(cpuCores(limits.cpu) >= 1, `cpu limit ${String(limits.cpu)}`);
      assert.ok(mebibytes(requests?.memory) >= figures.benchMaxRssMib, `memory request below the bench's peak RSS`);
      assert.ok(mebibytes(limits?.memory) >= 1.5 * figures.benchMaxRssMib, `memory limit below 1.5 x the peak RSS`);
    });

    test('probes do not depend on the gateway: a short startup budget, since startup waits for no token', () => {
      const container = sidecar(render(which));
      const startup = container.startupProbe;
      assert.ok(startup);
      const budget = (startup.periodSeconds ?? 10) * (startup.failureThreshold ?? 3);
      assert.ok(budget >= 10 && budget <= 60, `startup probe budget ${budget} s`);
      assert.ok((startup.periodSeconds ?? 10) <= 2, 'the application starts within a second or two of the sidecar');
    });

    test('the Secrets are mounted as directories (no subPath), read-only, group-readable only', () => {
      const spec = podSpec(render(which));
      const secretVolumes = (spec.volumes ?? []).filter((v) => v.secret);
      assert.deepEqual(
        secretVolumes.map((v) => v.name),
        ['signing-sidecar-secret', FORWARD_SECRET.volume],
      );
      for (const volume of secretVolumes) {
        assert.equal(volume.secret?.defaultMode, 0o440);
        for (const c of allContainers(spec)) {
          for (const m of c.volumeMounts ?? []) {
            if (m.name !== volume.name) continue;
            if (volume.name !== FORWARD_SECRET.volume) {
              assert.equal(c.name, SIDECAR_CONTAINER, 'only the sidecar sees the key and password');
            }
            assert.equal(m.subPath, undefined, 'subPath mounts never receive rotated Secrets');
            assert.equal(m.subPathExpr, undefined);
            assert.equal(m.readOnly, true);
          }
        }
      }
    });

    test('the forward secret: the sidecar signs with the file the application verifies with', () => {
      const rendered = render(which);
      const spec = podSpec(rendered);
      const mountOf = (container: { volumeMounts?: Array<{ name: string; mountPath: string }> }) =>
        only(
          (container.volumeMounts ?? []).filter((m) => m.name === FORWARD_SECRET.volume),
          'forward secret mount',
        ).mountPath;
      const path = `${mountOf(sidecar(rendered))}/${FORWARD_SECRET.file}`;
      assert.equal(sidecarEnv(rendered).get(FORWARD_SECRET.setting), path);
      const application = only(spec.containers, 'application container');
      assert.equal(mountOf(application), mountOf(sidecar(rendered)), 'the same files in the application');
      assert.ok(
        (application.env ?? []).some((e) => e.value === path),
        "the application's own setting names the file",
      );
      const config = loadConfig(withStandIns(Object.fromEntries(sidecarEnv(rendered))));
      assert.equal(config.postback?.forwardSecret?.symmetricKeySize, 32, 'forwards are signed');
      // Production refuses to start without it (docs/postbacks.md): the overlay must not depend on an opt-in.
      if (which === 'overlays/production') {
        assert.throws(
          () => loadConfig({ ...withStandIns(Object.fromEntries(sidecarEnv(rendered))), [FORWARD_SECRET.setting]: '' }),
          /SIDECAR_POSTBACK_FORWARD_SECRET_FILE .*required in production/,
        );
      }
      const secretNames = (spec.volumes ?? []).map((v) => v.secret?.secretName);
      if (which !== 'base') assert.ok(secretNames.includes(`signing-sidecar-postback-forward-${which.slice(9)}`));
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

for (const env of ['staging', 'production'] as const) {
  describe(`deploy/overlays/${env}/network-policy (opt-in)`, () => {
    const workload = (): Rendered => render(`overlays/${env}`);
    const policies = (): NetworkPolicy[] => render(`overlays/${env}/network-policy`).networkPolicies;
    const podLabels = (): Record<string, string> => deployment(workload()).spec?.template.metadata?.labels ?? {};
    const selecting = (): NetworkPolicy[] =>
      policies().filter((p) =>
        Object.entries(p.spec?.podSelector.matchLabels ?? {}).every(([k, v]) => podLabels()[k] === v),
      );
    const sidecarPolicy = (): NetworkPolicy =>
      only(
        policies().filter((p) => p.metadata?.name === 'signing-sidecar'),
        'NetworkPolicy signing-sidecar',
      );

    test('renders into the workload namespace, and every policy selects the example pods', () => {
      assert.ok(policies().length >= 2, 'the sidecar policy and the application example');
      for (const policy of policies()) {
        assert.equal(policy.metadata?.namespace, deployment(workload()).metadata?.namespace);
        assert.ok(selecting().includes(policy), `${String(policy.metadata?.name)} selects the example pods`);
      }
    });

    test("the sidecar's policy: out to DNS and the gateway (443) only, the gateway range set for the environment", () => {
      const policy = sidecarPolicy().spec;
      assert.equal(policy?.podSelector.matchLabels?.['signing-sidecar/enabled'], 'true', 'selects pods running it');
      assert.deepEqual([...(policy?.policyTypes ?? [])].sort(), ['Egress', 'Ingress']);
      const egressPorts = (policy?.egress ?? []).flatMap((rule) =>
        (rule.ports ?? []).map((p) => `${p.protocol}/${p.port}`),
      );
      assert.deepEqual(egressPorts.sort(), ['TCP/443', 'TCP/53', 'UDP/53']);
      for (const rule of policy?.egress ?? []) {
        assert.ok((rule.to ?? []).length > 0, 'every egress rule names its destination');
        for (const peer of rule.to ?? []) {
          assert.notEqual(peer.ipBlock?.cidr, '0.0.0.0/0', 'no open egress');
          assert.notEqual(peer.ipBlock?.cidr, '192.0.2.0/24', 'the overlay sets the gateway range');
        }
      }
    });

    test("the sidecar's policy: the admin port from Prometheus's namespace and pods only", () => {
      const port = Number(sidecarEnv(workload()).get('SIDECAR_ADMIN_PORT'));
      const admin = (sidecarPolicy().spec?.ingress ?? []).filter((r) => (r.ports ?? []).some((p) => p.port === port));
      assert.equal(admin.length, 1, 'one ingress rule for the admin port');
      for (const peer of admin[0]?.from ?? []) {
        assert.equal(peer.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'], 'monitoring');
        assert.equal(peer.podSelector?.matchLabels?.['app.kubernetes.io/name'], 'prometheus');
      }
    });

    test("the sidecar's policy: the postback port from the gateway's range and the ingress controller only", () => {
      const rules = (sidecarPolicy().spec?.ingress ?? []).filter((r) =>
        (r.ports ?? []).some((p) => p.port === POSTBACK_PORT),
      );
      assert.equal(rules.length, 1, 'one ingress rule for the receiver port');
      assert.deepEqual(
        (rules[0]?.ports ?? []).map((p) => `${p.protocol}/${p.port}`),
        [`TCP/${POSTBACK_PORT}`],
        'that port only',
      );
      const peers = rules[0]?.from ?? [];
      const ranges = peers.flatMap((p) => (p.ipBlock ? [p.ipBlock.cidr] : []));
      assert.equal(ranges.length, 1, "the gateway's postback source range");
      assert.notEqual(ranges[0], '0.0.0.0/0');
      assert.notEqual(ranges[0], '192.0.2.0/24', 'the overlay sets the gateway range');
      for (const peer of peers.filter((p) => !p.ipBlock)) {
        assert.equal(peer.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'], 'ingress-nginx');
        assert.equal(peer.podSelector?.matchLabels?.['app.kubernetes.io/name'], 'ingress-nginx');
      }
    });

    test('applied together, the policies leave the application its callers and its own egress', () => {
      const ingressPorts = new Set(
        selecting().flatMap((p) => (p.spec?.ingress ?? []).flatMap((r) => (r.ports ?? []).map((port) => port.port))),
      );
      for (const c of podSpec(workload()).containers) {
        for (const port of c.ports ?? [])
          assert.ok(ingressPorts.has(port.containerPort), `${c.name} port ${port.containerPort}`);
      }
      const egressPorts = selecting().flatMap((p) =>
        (p.spec?.egress ?? []).flatMap((r) => (r.ports ?? []).map((port) => Number(port.port))),
      );
      assert.ok(
        egressPorts.some((port) => port !== 53 && port !== 443),
        'some egress of the application itself (the example: its database)',
      );
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

/**
 * An overlay of `resource` with deploy/components/`component` added, as the docs tell operators to write it; in
 * `namespace` (the overlay's) when the component generates objects of its own.
 */
function renderWithComponent(component: string, resource: string, namespace?: string): Rendered {
  const dir = join(scratch, component, resource.replaceAll('/', '-'));
  mkdirSync(dir, { recursive: true });
  const up = relative(dir, DEPLOY_DIR);
  writeFileSync(
    join(dir, 'kustomization.yaml'),
    [
      'apiVersion: kustomize.config.k8s.io/v1beta1',
      'kind: Kustomization',
      ...(namespace === undefined ? [] : [`namespace: ${namespace}`]),
      `resources: ['${up}/${resource}']`,
      `components: ['${up}/components/${component}']`,
      '',
    ].join('\n'),
  );
  return renderDir(dir, `${resource} + components/${component}`);
}

describe('deploy/components/redis-state (fleet mode, docs/fleet.md)', () => {
  const withComponent = (resource: string): Rendered => renderWithComponent('redis-state', resource);
  const REDIS_MOUNT = '/var/run/secrets/signing-sidecar-redis';
  const MAC_MOUNT = '/var/run/secrets/signing-sidecar-state-mac';

  test('sets the Redis settings on the sidecar, known to the config and accepted by it', () => {
    const rendered = withComponent('overlays/production');
    const env = Object.fromEntries(sidecarEnv(rendered));
    assert.equal(env.SIDECAR_STATE_STORE, 'redis');
    assert.match(env.SIDECAR_REDIS_URL ?? '', /^rediss:\/\//, 'TLS in production');
    assert.equal(env.SIDECAR_REDIS_PASSWORD_FILE, `${REDIS_MOUNT}/password`);
    const known = knownSettings();
    for (const name of Object.keys(env)) assert.ok(known.has(name), `${name} is not a setting of src/config/schema.ts`);
    const redisPasswordFile = join(scratch, 'redis-password');
    writeFileSync(redisPasswordFile, 'example-redis-password\n');
    assert.equal(env.SIDECAR_STATE_MAC_KEY_FILE, `${MAC_MOUNT}/key`, 'production with Redis requires the MAC key');
    const macKeyFile = join(scratch, 'state-mac-key');
    writeFileSync(macKeyFile, `${randomBytes(32).toString('base64')}\n`);
    const config = loadConfig({
      ...withStandIns(env),
      SIDECAR_REDIS_PASSWORD_FILE: redisPasswordFile,
      SIDECAR_STATE_MAC_KEY_FILE: macKeyFile,
    });
    assert.equal(config.state.store, 'redis');
    assert.equal(config.state.redis?.tls, true);
    assert.equal(config.state.redis?.username, 'signing-sidecar');
    assert.equal(config.state.redis?.recordMac.keys.length, 1);
  });

  test('mounts the MAC key from a Secret of its own (not the Redis one), read-only, for the sidecar only', () => {
    const spec = podSpec(withComponent('overlays/production'));
    const volume = only(
      (spec.volumes ?? []).filter((v) => v.secret?.secretName === 'signing-sidecar-state-mac'),
      'MAC key Secret volume',
    );
    assert.equal(volume.secret?.defaultMode, 0o440);
    for (const c of allContainers(spec)) {
      const mounts = (c.volumeMounts ?? []).filter((m) => m.name === volume.name);
      if (c.name !== SIDECAR_CONTAINER) {
        assert.equal(mounts.length, 0, `${c.name} must not see the MAC key`);
        continue;
      }
      const mount = only(mounts, 'MAC key Secret mount');
      assert.deepEqual([mount.mountPath, mount.readOnly, mount.subPath], [MAC_MOUNT, true, undefined]);
    }
  });

  test('mounts the Redis password Secret as a directory, read-only, for the sidecar only', () => {
    const rendered = withComponent('overlays/production');
    const spec = podSpec(rendered);
    const volume = only(
      (spec.volumes ?? []).filter((v) => v.secret?.secretName === 'signing-sidecar-redis'),
      'Redis Secret volume',
    );
    assert.equal(volume.secret?.defaultMode, 0o440);
    for (const c of allContainers(spec)) {
      const mounts = (c.volumeMounts ?? []).filter((m) => m.name === volume.name);
      if (c.name !== SIDECAR_CONTAINER) {
        assert.equal(mounts.length, 0, `${c.name} must not see the Redis password`);
        continue;
      }
      const mount = only(mounts, 'Redis Secret mount');
      assert.equal(mount.mountPath, REDIS_MOUNT);
      assert.equal(mount.readOnly, true);
      assert.equal(mount.subPath, undefined, 'subPath mounts never receive rotated Secrets');
    }
    assert.ok(
      (spec.volumes ?? []).some((v) => v.secret?.secretName === 'signing-sidecar-production'),
      'the credentials Secret stays',
    );
    assert.equal(rendered.networkPolicies.length, 0, 'the workload still creates no NetworkPolicy');
  });

  test("opens egress to Redis (6379, 6380) in the sidecar's policy, keeping DNS and the gateway", () => {
    const policy = only(
      withComponent('overlays/production/network-policy').networkPolicies.filter(
        (p) => p.metadata?.name === 'signing-sidecar',
      ),
      'NetworkPolicy signing-sidecar',
    ).spec;
    const rules = policy?.egress ?? [];
    const ports = (rule: (typeof rules)[number]) => (rule.ports ?? []).map((p) => `${p.protocol}/${p.port}`).sort();
    const redis = only(
      rules.filter((rule) => ports(rule).includes('TCP/6379')),
      'egress rule to Redis',
    );
    assert.deepEqual(ports(redis), ['TCP/6379', 'TCP/6380']);
    assert.ok((redis.to ?? []).length > 0, 'the rule names its destination');
    for (const peer of redis.to ?? []) assert.notEqual(peer.ipBlock?.cidr, '0.0.0.0/0', 'no open egress');
    const all = rules.flatMap(ports).sort();
    assert.deepEqual(all, ['TCP/443', 'TCP/53', 'TCP/6379', 'TCP/6380', 'UDP/53']);
  });
});

describe('deploy/components/tracing (docs/operations.md, "Tracing")', () => {
  /** The workload and its network policies, both without the component or both with it, as the docs say. */
  const rendered = (withTracing: boolean) =>
    (['staging', 'production'] as const).map((env) => {
      const [workload, policies] = [`overlays/${env}`, `overlays/${env}/network-policy`] as const;
      const renderOf = (which: typeof workload | typeof policies) =>
        withTracing ? renderWithComponent('tracing', which) : render(which);
      return {
        env,
        workload: renderOf(workload),
        policy: only(
          renderOf(policies).networkPolicies.filter((p) => p.metadata?.name === 'signing-sidecar'),
          'NetworkPolicy signing-sidecar',
        ),
      };
    });
  const ports = (rule: NonNullable<NonNullable<NetworkPolicy['spec']>['egress']>[number]) =>
    (rule.ports ?? []).map((p) => `${p.protocol}/${p.port}`).sort();

  test('without it: tracing is off and the policy allows no egress but DNS and the gateway', () => {
    for (const { env, workload, policy } of rendered(false)) {
      const config = loadConfig(withStandIns(Object.fromEntries(sidecarEnv(workload))));
      assert.equal(config.tracing.enabled, false, `${env}: tracing off`);
      const all = (policy.spec?.egress ?? []).flatMap(ports).sort();
      assert.deepEqual(all, ['TCP/443', 'TCP/53', 'UDP/53'], `${env}: no collector`);
    }
  });

  test("with it: tracing is on, and the policy allows the endpoint's collector on its port only", () => {
    for (const { env, workload, policy } of rendered(true)) {
      const settings = Object.fromEntries(sidecarEnv(workload));
      const config = loadConfig(withStandIns(settings));
      assert.equal(config.tracing.enabled, true, `${env}: tracing on`);
      const endpoint = new URL(settings.OTEL_EXPORTER_OTLP_ENDPOINT ?? '');
      const port = Number(endpoint.port || (endpoint.protocol === 'https:' ? 443 : 80));
      const rules = (policy.spec?.egress ?? []).filter((rule) => ports(rule).includes(`TCP/${port}`));
      const collector = only(rules, `${env}: egress rule to the collector`);
      assert.deepEqual(ports(collector), [`TCP/${port}`], 'that port only');
      // The endpoint's Service is <name>.<namespace>.svc...: the rule names the same namespace, and its pods.
      const namespace = endpoint.hostname.split('.')[1];
      const peer = only(collector.to ?? [], 'the collector peer');
      assert.equal(peer.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'], namespace);
      assert.ok(Object.keys(peer.podSelector?.matchLabels ?? {}).length > 0, "the collector's pods, not all of them");
      assert.equal(peer.ipBlock, undefined, 'no open egress');
      const all = (policy.spec?.egress ?? []).flatMap(ports).sort();
      assert.deepEqual(all, ['TCP/443', 'TCP/53', `TCP/${port}`, 'UDP/53'].sort(), `${env}: DNS and gateway kept`);
    }
  });
});

describe('deploy/components/pkcs11 (docs/operations.md, "The private key in an HSM or a cloud KMS")', () => {
  const PIN_SECRET = 'signing-sidecar-pkcs11-pin';
  const MODULE_COPIER = 'pkcs11-module';
  /** The component is for the workload overlays, each in its own namespace. */
  const withPkcs11 = () =>
    (['staging', 'production'] as const).map((env) => {
      const namespace = deployment(render(`overlays/${env}`)).metadata?.namespace;
      return { env, rendered: renderWithComponent('pkcs11', `overlays/${env}`, namespace) };
    });

  test('renders with each overlay, its ConfigMap in the overlay namespace and mounted read-only', () => {
    for (const { env, rendered } of withPkcs11()) {
      const spec = podSpec(rendered);
      const volume = only(
        (spec.volumes ?? []).filter((v) => v.configMap?.name?.startsWith('signing-sidecar-pkcs11-')),
        `${env}: the module configuration volume`,
      );
      const configMap = only(
        rendered.configMaps.filter((c) => c.metadata?.name === volume.configMap?.name),
        `${env}: ConfigMap ${String(volume.configMap?.name)}`,
      );
      assert.equal(configMap.metadata?.namespace, deployment(rendered).metadata?.namespace, `${env}: its namespace`);
      const mount = only(
        (sidecar(rendered).volumeMounts ?? []).filter((m) => m.name === volume.name),
        'configuration mount',
      );
      assert.equal(mount.readOnly, true);
      const configPath = sidecarEnv(rendered).get('KMS_PKCS11_CONFIG') ?? '';
      const file = configPath.slice(mount.mountPath.length + 1);
      assert.equal(configPath, `${mount.mountPath}/${file}`, 'KMS_PKCS11_CONFIG names a file of the ConfigMap');
      assert.match(configMap.data?.[file] ?? '', /label: /, `${file}: the key ring's token label`);
      for (const text of Object.values(configMap.data ?? {})) assert.doesNotMatch(text, /pin|password|PRIVATE KEY/i);
    }
  });

  test('the sidecar accepts the settings: signer pkcs11, no key file, nothing refused', () => {
    const pinFile = join(scratch, 'pkcs11-pin');
    writeFileSync(pinFile, 'example-pin\n');
    const publicKeyFile = join(scratch, 'token-key.pub.pem');
    writeFileSync(
      publicKeyFile,
      generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey.export({ type: 'spki', format: 'pem' }),
    );
    for (const { env, rendered } of withPkcs11()) {
      const settings = Object.fromEntries(sidecarEnv(rendered));
      assert.equal(settings.SIDECAR_PRIVATE_KEY_FILE, undefined, `${env}: no private key file setting remains`);
      const known = knownSettings();
      for (const name of Object.keys(settings).filter((n) => n.startsWith('SIDECAR_')))
        assert.ok(known.has(name), `${name} is not a setting of src/config/schema.ts`);
      assert.equal(settings.SIDECAR_PUBLIC_KEY_FILE, `${secretMountPath(`overlays/${env}`)}/public-key.pem`);
      const config = loadConfig({
        // withStandIns adds a key file for every Secret file setting: unset again, as the component unsets it.
        ...withStandIns(settings),
        SIDECAR_PRIVATE_KEY_FILE: undefined,
        SIDECAR_PKCS11_PIN_FILE: pinFile,
        SIDECAR_PUBLIC_KEY_FILE: publicKeyFile,
      });
      assert.equal(config.signer.kind, 'pkcs11', `${env}: signs through the module`);
      assert.equal(config.environment, env);
      if (config.signer.kind !== 'pkcs11') continue;
      assert.equal(config.signer.module, settings.SIDECAR_PKCS11_MODULE);
      assert.deepEqual(config.signer.token, { label: settings.SIDECAR_PKCS11_TOKEN_LABEL });
      assert.ok(config.signer.publicKey, 'the token key is pinned to the public key the gateway holds');
      assert.equal(String(config.signer.sessions), settings.SIDECAR_PKCS11_SESSIONS);
      assert.ok(Number(settings.UV_THREADPOOL_SIZE) >= config.signer.sessions, 'a libuv thread per session');
    }
  });

  test('the PIN comes from a Secret of its own, read-only, for the sidecar only; never from env or a ConfigMap', () => {
    for (const { env, rendered } of withPkcs11()) {
      const spec = podSpec(rendered);
      const volume = only(
        (spec.volumes ?? []).filter((v) => v.secret?.secretName === PIN_SECRET),
        `${env}: PIN Secret volume`,
      );
      assert.equal(volume.secret?.defaultMode, 0o440);
      const pinFile = sidecarEnv(rendered).get('SIDECAR_PKCS11_PIN_FILE') ?? '';
      for (const c of allContainers(spec)) {
        const mounts = (c.volumeMounts ?? []).filter((m) => m.name === volume.name);
        if (c.name !== SIDECAR_CONTAINER) {
          assert.equal(mounts.length, 0, `${c.name} must not see the PIN`);
          continue;
        }
        const mount = only(mounts, 'PIN mount');
        assert.equal(mount.readOnly, true);
        assert.equal(mount.subPath, undefined, 'subPath mounts never receive a rotated PIN');
        assert.ok(pinFile.startsWith(`${mount.mountPath}/`), 'SIDECAR_PKCS11_PIN_FILE is in the PIN Secret');
      }
      for (const c of allContainers(spec)) {
        for (const e of c.env ?? []) assert.doesNotMatch(e.name, /PIN$/, `${c.name}: no PIN in env`);
      }
      for (const cm of rendered.configMaps) assert.ok(!Object.keys(cm.data ?? {}).some((k) => /pin/i.test(k)));
      assert.ok(
        (spec.volumes ?? []).some((v) => v.secret?.secretName === `signing-sidecar-${env}`),
        'the credentials Secret stays (password, postback keys, the public key)',
      );
    }
  });

  test('the module is copied before the sidecar starts, into a volume the sidecar mounts read-only', () => {
    for (const { env, rendered } of withPkcs11()) {
      const spec = podSpec(rendered);
      const names = (spec.initContainers ?? []).map((c) => c.name);
      // Init containers start one after the other: the native sidecar starts once the copy has exited.
      assert.ok(names.indexOf(MODULE_COPIER) >= 0, `${env}: an init container ${MODULE_COPIER}`);
      assert.ok(names.indexOf(MODULE_COPIER) < names.indexOf(SIDECAR_CONTAINER), `${env}: ${names.join(', ')}`);
      const copier = (spec.initContainers ?? []).find((c) => c.name === MODULE_COPIER);
      assert.equal(copier?.restartPolicy, undefined, 'a plain init container, run to completion');
      const modulePath = sidecarEnv(rendered).get('SIDECAR_PKCS11_MODULE') ?? '';
      const mount = only(
        (sidecar(rendered).volumeMounts ?? []).filter((m) => modulePath.startsWith(`${m.mountPath}/`)),
        'the module mount',
      );
      assert.equal(mount.readOnly, true, 'the sidecar cannot alter the module');
      const copierMount = (copier?.volumeMounts ?? []).find((m) => m.name === mount.name);
      assert.ok(copierMount && copierMount.readOnly !== true, 'the copier writes the same volume');
      assert.ok(copier?.command?.includes(`${copierMount.mountPath}${modulePath.slice(mount.mountPath.length)}`));
      assert.ok((spec.volumes ?? []).find((v) => v.name === mount.name)?.emptyDir, 'an emptyDir');
      // Its own user, and the pod's security rules, as every container of the overlays.
      const sc = copier?.securityContext;
      assert.ok(sc?.runAsUser !== undefined && sc.runAsUser !== sidecar(rendered).securityContext?.runAsUser);
      assert.notEqual(sc?.runAsGroup, sidecar(rendered).securityContext?.runAsGroup);
      assert.equal(sc?.readOnlyRootFilesystem, true);
      assert.equal(sc?.allowPrivilegeEscalation, false);
      assert.deepEqual(sc?.capabilities?.drop, ['ALL']);
      assert.ok(copier?.resources?.limits?.memory !== undefined && copier.resources.limits.cpu !== undefined);
    }
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
    (spec.volumes ?? []).filter((v) => v.secret && v.name !== FORWARD_SECRET.volume),
    'secret volume',
  );
  const mount = only(
    (sidecar(render(which)).volumeMounts ?? []).filter((m) => m.name === volume.name),
    'secret mount',
  );
  return mount.mountPath;
}

/** What the manifests are sized for: the expected rate and the bench's cautious figures, declared once. */
interface Sizing {
  readonly expectedPaymentsPerSecond: number;
  readonly benchMinThroughputPerCore: number;
  readonly benchMaxRssMib: number;
}

function sizing(): Sizing {
  return JSON.parse(readFileSync(`${REPO_ROOT}deploy/sizing.json`, 'utf8')) as Sizing;
}

function cpuCores(quantity: string | number | undefined): number {
  const text = String(quantity ?? '0');
  return text.endsWith('m') ? Number(text.slice(0, -1)) / 1000 : Number(text);
}

function mebibytes(quantity: string | number | undefined): number {
  const match = /^(\d+(?:\.\d+)?)(Mi|Gi)$/.exec(String(quantity ?? ''));
  assert.ok(match, `memory quantity ${String(quantity)}: use Mi or Gi`);
  return Number(match[1]) * (match[2] === 'Gi' ? 1024 : 1);
}
