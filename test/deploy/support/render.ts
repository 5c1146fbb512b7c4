// Renders the kustomizations with `kubectl kustomize` (the kubectl in the node machine image embeds
// kustomize v5) and validates every object against the Kubernetes OpenAPI schemas (kubernetes-models) and the
// Prometheus Operator CRD schemas (@kubernetes-models/prometheus-operator), all offline.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ConfigMap, type IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Service, type IService } from 'kubernetes-models/v1/Service';
import { ServiceAccount, type IServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { Deployment, type IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import { NetworkPolicy, type INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import {
  PodMonitor,
  type IPodMonitor,
} from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor';
import {
  PrometheusRule,
  type IPrometheusRule,
} from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { parseAllDocuments } from 'yaml';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const DEPLOY_DIR = `${REPO_ROOT}deploy/`;
export const KUSTOMIZATIONS = ['base', 'overlays/staging', 'overlays/production'] as const;
/** The opt-in network policies, applied on their own (docs/operations.md, "Network policy"). */
export const NETWORK_POLICY_KUSTOMIZATIONS = [
  'network-policy',
  'overlays/staging/network-policy',
  'overlays/production/network-policy',
] as const;
export type Kustomization = (typeof KUSTOMIZATIONS)[number] | (typeof NETWORK_POLICY_KUSTOMIZATIONS)[number];

/** The sidecar's container name: alerts (up{container=...}) and the tests find it by this name. */
export const SIDECAR_CONTAINER = 'signing-sidecar';

export interface Rendered {
  readonly configMaps: ConfigMap[];
  readonly serviceAccounts: ServiceAccount[];
  readonly services: Service[];
  readonly deployments: Deployment[];
  readonly networkPolicies: NetworkPolicy[];
  readonly podMonitors: PodMonitor[];
  readonly prometheusRules: PrometheusRule[];
  /** Every object, in render order, as apiVersion/kind/name. */
  readonly ids: string[];
}

interface Meta {
  apiVersion?: unknown;
  kind?: unknown;
  metadata?: { name?: unknown };
}

function kubectl(args: string[]): string {
  try {
    return execFileSync('kubectl', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT') {
      throw new Error(
        'kubectl not found on PATH: the deploy checks render the kustomizations with `kubectl kustomize` ' +
          '(Debian/Google package "kubectl", part of the node machine image). Install it; nothing is skipped.',
      );
    }
    throw new Error(`kubectl ${args.join(' ')} failed: ${e.stderr ?? e.message}`);
  }
}

const cache = new Map<string, Rendered>();

/** Renders one kustomization and validates every object; throws naming the first invalid object. */
export function render(which: Kustomization): Rendered {
  return renderDir(`${DEPLOY_DIR}${which}`, which);
}

/** The same for a kustomization anywhere (a test's own overlay, e.g. one adding a component), named `which`. */
export function renderDir(dir: string, which: string): Rendered {
  const hit = cache.get(dir);
  if (hit) return hit;
  const text = kubectl(['kustomize', dir]);
  const out: Rendered = {
    configMaps: [],
    serviceAccounts: [],
    services: [],
    deployments: [],
    networkPolicies: [],
    podMonitors: [],
    prometheusRules: [],
    ids: [],
  };
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`${which}: YAML error ${doc.errors[0]?.message ?? ''}`);
    const raw: unknown = doc.toJS();
    if (raw === null || raw === undefined) continue;
    const meta = raw as Meta;
    const id = `${String(meta.apiVersion)}/${String(meta.kind)}/${String(meta.metadata?.name)}`;
    out.ids.push(id);
    try {
      addValidated(out, `${String(meta.apiVersion)}/${String(meta.kind)}`, raw);
    } catch (err) {
      throw new Error(`${which}: ${id} is invalid: ${(err as Error).message}`, { cause: err });
    }
  }
  cache.set(dir, out);
  return out;
}

function addValidated(out: Rendered, type: string, raw: unknown): void {
  switch (type) {
    case 'v1/ConfigMap':
      return push(out.configMaps, new ConfigMap(raw as IConfigMap));
    case 'v1/Service':
      return push(out.services, new Service(raw as IService));
    case 'v1/ServiceAccount':
      return push(out.serviceAccounts, new ServiceAccount(raw as IServiceAccount));
    case 'apps/v1/Deployment':
      return push(out.deployments, new Deployment(raw as IDeployment));
    case 'networking.k8s.io/v1/NetworkPolicy':
      return push(out.networkPolicies, new NetworkPolicy(raw as INetworkPolicy));
    case 'monitoring.coreos.com/v1/PodMonitor':
      return push(out.podMonitors, new PodMonitor(raw as IPodMonitor));
    case 'monitoring.coreos.com/v1/PrometheusRule':
      return push(out.prometheusRules, new PrometheusRule(raw as IPrometheusRule));
    default:
      // A new kind needs its schema here: an object nobody validates is an object nobody checked.
      throw new Error(`no schema registered for ${type} in test/deploy/support/render.ts`);
  }
}

function push<T extends { validate(): void }>(list: T[], model: T): void {
  model.validate();
  list.push(model);
}

export function only<T>(list: readonly T[], what: string): T {
  if (list.length !== 1) throw new Error(`expected exactly one ${what}, found ${list.length}`);
  return list[0] as T;
}
