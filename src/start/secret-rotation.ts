// Secret rotation (docs/configuration.md, "Secret rotation"): what each watched file's new content replaces, and how a reload is logged and
// counted. The watching itself is config/secret-watch.ts; this file connects it to the signer, the token client's
// password, the gateway client's trusted CAs, the forward proxy's password and CA, the postback keys and the MAC keys of
// the records in Redis.
import type { KeyObject } from 'node:crypto';
import type { Config } from '../config/config.js';
import { forwardSecretFromFile, postbackKeysFromFile } from '../config/postback-settings.js';
import { settingName } from '../config/schema.js';
import type { Secret } from '../config/secret.js';
import { caFromFile, macKeysFromFile, passwordFromFile, privateKeyFromFile } from '../config/secret-files.js';
import { pinFromFile } from '../config/signer-settings.js';
import {
  SecretWatcher,
  type ReloadReport,
  type ReloadTrigger,
  type WatchedFile,
  type WatchedSetting,
} from '../config/secret-watch.js';
import { limitRulesFromFile, type LimitRules } from '../limits/rules.js';
import type { Logger } from '../observability/log.js';
import type { SidecarMetrics } from '../observability/metrics.js';
import { FORWARD_SECRET_GRACE_MS } from '../postback/delivery-signing.js';
import { publicKeyFingerprint } from '../signing/keys.js';
import type { Pkcs11Signer } from '../signing/pkcs11-signer.js';
import type { SwappableSigner } from '../signing/signer.js';
import type { RotatableGatewayClient } from '../upstream/gateway-client.js';

/** The password the next login uses: read by the token client at each password grant, never sooner. */
export class PasswordHolder {
  constructor(private value: Secret) {}

  current(): Secret {
    return this.value;
  }

  replace(value: Secret): void {
    this.value = value;
  }
}

export interface RotationTargets {
  /** The key file's signer takes a new key; the PKCS#11 signer a new PIN for its next session. */
  readonly signer: SwappableSigner | Pkcs11Signer;
  readonly password: PasswordHolder;
  readonly gatewayClient: RotatableGatewayClient;
  /** The postback receiver, when on (docs/postbacks.md): its key file and its forward secret file, when set. */
  readonly postbacks?:
    { replaceKeys(keys: readonly KeyObject[]): void; replaceForwardSecret(secret: KeyObject): void } | undefined;
  /** The MACs of idempotency records and queued postbacks, when SIDECAR_STATE_MAC_KEY_FILE is set (docs/fleet.md). */
  readonly recordMac?: { replaceKeys(keys: readonly KeyObject[]): void } | undefined;
  /**
   * The money limits, when SIDECAR_LIMITS_FILE is set (docs/limits.md): a valid new file is in use at once. Watched
   * from the content they were read from at start, so a change made since is not missed.
   */
  readonly limits?: { readonly guard: { use(rules: LimitRules): void }; readonly loadedDigest: string } | undefined;
}

const MESSAGES: Readonly<Record<WatchedSetting, string>> = {
  private_key: 'signing key rotated: the next signature uses the new key',
  pkcs11_pin: 'PKCS#11 PIN rotated: the next session the sidecar opens on the token logs in with it',
  password: 'password rotated: the next login uses it (no login now: a login revokes the tokens of every replica)',
  upstream_ca: 'upstream CA rotated: new connections to the gateway trust it; idle ones were closed',
  upstream_proxy_password: 'forward proxy password rotated: the next tunnel through the proxy uses it',
  upstream_proxy_ca: "forward proxy CA rotated: the next tunnel trusts it for the proxy's certificate",
  postback_keys: "gateway's postback keys rotated: the next postback is verified with the keys now in the file",
  postback_forward_secret: `postback forward secret rotated: the next delivery to the application is signed with it, and for ${FORWARD_SECRET_GRACE_MS / 60_000} minutes with the previous one too`,
  state_mac_keys:
    'state MAC keys rotated: records are signed with the first key now and read under any key in the file',
  limits: 'money limits reloaded: the next payment is checked against the rules now in the file',
};

/** The files this configuration watches: the private key always, the password and the CA when set as files. */
function watchedFiles(config: Config, targets: RotationTargets, onKey: (fingerprint: string) => void): WatchedFile[] {
  const files: WatchedFile[] = [signerFile(config, targets.signer, onKey)];
  const { password } = config.secretFiles;
  const upstreamCa = config.upstream.caFile;
  if (password !== undefined) {
    files.push(
      watched(config, {
        name: 'password',
        key: 'passwordFile',
        file: password,
        parse: passwordFromFile,
        install: (value) => targets.password.replace(value),
      }),
    );
  }
  if (upstreamCa !== undefined) {
    files.push(
      watched(config, {
        name: 'upstream_ca',
        key: 'upstream.caFile',
        file: upstreamCa,
        parse: caFromFile,
        install: (ca) => targets.gatewayClient.replaceCa(ca),
      }),
    );
  }
  files.push(...proxyFiles(config, targets));
  const postbackKeys = postbackKeysFile(config, targets);
  if (postbackKeys !== undefined) files.push(postbackKeys);
  const forwardSecret = forwardSecretFile(config, targets);
  if (forwardSecret !== undefined) files.push(forwardSecret);
  const macKeys = config.state.redis?.recordMac.keyFile;
  const { recordMac } = targets;
  if (macKeys !== undefined && recordMac !== undefined) {
    // A rotation adds the new key on a line of its own, makes it first once every replica has it, and removes the
    // old one after the records it signed have expired (docs/fleet.md, "Rotating the MAC key").
    files.push(
      watched(config, {
        name: 'state_mac_keys',
        key: 'state.macKeyFile',
        file: macKeys,
        parse: macKeysFromFile,
        install: (keys) => recordMac.replaceKeys(keys),
      }),
    );
  }
  const { limitsFile } = config;
  const { limits } = targets;
  if (limitsFile !== undefined && limits !== undefined) {
    files.push({
      ...watched(config, {
        name: 'limits',
        key: 'limitsFile',
        file: limitsFile,
        parse: limitRulesFromFile(config.signedRoutes),
        install: (rules) => limits.guard.use(rules),
      }),
      loadedDigest: limits.loadedDigest,
    });
  }
  return files;
}

/** The signer's secret file: the private key file, or the PKCS#11 PIN file. */
function signerFile(
  config: Config,
  signer: RotationTargets['signer'],
  onKey: (fingerprint: string) => void,
): WatchedFile {
  if (config.signer.kind === 'pkcs11') {
    return watched(config, {
      name: 'pkcs11_pin',
      key: 'pkcs11.pinFile',
      file: config.signer.pinFile,
      parse: pinFromFile,
      install: (pin) => {
        if (signer.kind === 'pkcs11') signer.replacePin(pin);
      },
    });
  }
  return watched(config, {
    name: 'private_key',
    key: 'privateKeyFile',
    file: config.signer.privateKeyFile,
    parse: privateKeyFromFile,
    install: (key) => {
      if (signer.kind !== 'file') return;
      signer.replaceKey(key);
      onKey(publicKeyFingerprint(key));
    },
  });
}

/** The forward proxy's password and CA files, when set. */
function proxyFiles(config: Config, targets: RotationTargets): WatchedFile[] {
  const proxy = config.upstream.proxy;
  const files: WatchedFile[] = [];
  if (proxy?.passwordFile !== undefined) {
    files.push(
      watched(config, {
        name: 'upstream_proxy_password',
        key: 'upstream.proxy.passwordFile',
        file: proxy.passwordFile,
        parse: passwordFromFile,
        install: (value) => targets.gatewayClient.replaceProxyPassword(value),
      }),
    );
  }
  if (proxy?.caFile !== undefined) {
    files.push(
      watched(config, {
        name: 'upstream_proxy_ca',
        key: 'upstream.proxy.caFile',
        file: proxy.caFile,
        parse: caFromFile,
        install: (ca) => targets.gatewayClient.replaceProxyCa(ca),
      }),
    );
  }
  return files;
}

/** The gateway's postback key file: a rotation adds the new key beside the old one, then removes the old one. */
function postbackKeysFile(config: Config, targets: RotationTargets): WatchedFile | undefined {
  const file = config.postback?.publicKeyFile;
  const receiver = targets.postbacks;
  if (file === undefined || receiver === undefined) return undefined;
  return watched(config, {
    name: 'postback_keys',
    key: 'postback.publicKeyFile',
    file,
    parse: postbackKeysFromFile,
    install: (keys) => receiver.replaceKeys(keys),
  });
}

/** The secret that signs what the application gets (docs/postbacks.md#rotating-the-forward-secret). */
function forwardSecretFile(config: Config, targets: RotationTargets): WatchedFile | undefined {
  const file = config.postback?.forwardSecretFile;
  const receiver = targets.postbacks;
  if (file === undefined || receiver === undefined) return undefined;
  return watched(config, {
    name: 'postback_forward_secret',
    key: 'postback.forwardSecretFile',
    file,
    parse: forwardSecretFromFile,
    install: (secret) => receiver.replaceForwardSecret(secret),
  });
}

interface SecretFileSpec<T> {
  readonly name: WatchedSetting;
  /** The setting's key in the schema, for how logs name it. */
  readonly key: string;
  readonly file: string;
  /** Validates a content; throws a ConfigError that names the setting, never the content. */
  readonly parse: (setting: string, file: string, text: string) => T;
  readonly install: (value: T) => void;
}

/** One watched secret file: each new content is parsed first, and installed only when it is valid. */
function watched<T>(config: Config, spec: SecretFileSpec<T>): WatchedFile {
  const { name, file, parse, install } = spec;
  const setting = settingName(spec.key);
  return {
    name,
    setting,
    file,
    loadedDigest: config.secretFiles.loadedDigests[file],
    load: (text) => {
      const value = parse(setting, file, text);
      return () => install(value);
    },
  };
}

/**
 * A watcher (not yet started) over the configuration's secret files: each valid change is installed, logged and
 * counted; each refused one is logged at error level naming the setting (never the content) and counted.
 */
export function createSecretRotation(
  config: Config,
  keyFingerprint: string,
  targets: RotationTargets,
  metrics: SidecarMetrics,
  log: Logger,
): SecretWatcher {
  let fingerprint = keyFingerprint;
  const onKey = (next: string): void => {
    fingerprint = next;
    metrics.signingKey(next);
  };
  const report = (report: ReloadReport, trigger: ReloadTrigger): void => {
    const fields = { event: 'config.reload', setting: report.setting, trigger, outcome: report.outcome };
    if (report.outcome === 'unchanged') {
      log.info(fields, 'secret file unchanged');
      return;
    }
    metrics.configReload(report.name, report.outcome);
    if (report.outcome === 'error') {
      log.error({ ...fields, reason: report.reason }, 'secret file refused: the value in use stays');
    } else if (report.name === 'private_key') {
      log.info({ ...fields, keyFingerprint: fingerprint }, MESSAGES.private_key);
    } else {
      log.info(fields, MESSAGES[report.name]);
    }
  };
  const watcher = new SecretWatcher(watchedFiles(config, targets, onKey), {
    intervalMs: config.secretFiles.pollIntervalMs,
    report,
  });
  metrics.initConfigReloads(watcher.settings);
  return watcher;
}
