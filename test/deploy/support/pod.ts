// Helpers over the rendered example Deployment: the sidecar container, its effective environment, its ports.
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import type { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { KNOWN_ENV_VARS } from '../../../src/config/unknown-names.js';
import { SIDECAR_CONTAINER, only, type Rendered } from './render.js';

export function podSpec(rendered: Rendered): IPodSpec {
  const spec = only(rendered.deployments, 'Deployment').spec?.template.spec;
  if (!spec) throw new Error('Deployment has no pod spec');
  return spec;
}

export function deployment(rendered: Rendered): Deployment {
  return only(rendered.deployments, 'Deployment');
}

export function sidecar(rendered: Rendered): IContainer {
  const found = (podSpec(rendered).initContainers ?? []).filter((c) => c.name === SIDECAR_CONTAINER);
  return only(found, `init container ${SIDECAR_CONTAINER}`);
}

/**
 * The sidecar's environment as Kubernetes builds it: envFrom ConfigMaps first, then `env` entries, which win.
 * Only literal values: a valueFrom would hide a setting from these checks, so it is refused.
 */
export function sidecarEnv(rendered: Rendered): Map<string, string> {
  const container = sidecar(rendered);
  const env = new Map<string, string>();
  for (const from of container.envFrom ?? []) {
    if (from.secretRef) throw new Error('envFrom secretRef: secrets must come from files (*_FILE), not env vars');
    const name = from.configMapRef?.name;
    const cm = only(
      rendered.configMaps.filter((c) => c.metadata?.name === name),
      `ConfigMap ${String(name)}`,
    );
    for (const [key, value] of Object.entries(cm.data ?? {})) env.set(`${from.prefix ?? ''}${key}`, value);
  }
  for (const entry of container.env ?? []) {
    if (entry.valueFrom) throw new Error(`env ${entry.name} uses valueFrom; the checks need literal values`);
    env.set(entry.name, entry.value ?? '');
  }
  return env;
}

/** Every env var name the sidecar reads: each setting's, and the config file's. */
export function knownSettings(): Set<string> {
  return new Set(KNOWN_ENV_VARS);
}

/** Resolves a probe's port (number or container port name) against the container's declared ports. */
export function resolvePort(container: IContainer, port: number | string): number {
  if (typeof port === 'number') return port;
  const named = (container.ports ?? []).filter((p) => p.name === port);
  return only(named, `port named ${port} on ${container.name}`).containerPort;
}

export function allContainers(spec: IPodSpec): IContainer[] {
  return [...(spec.initContainers ?? []), ...spec.containers];
}
