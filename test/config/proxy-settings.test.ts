import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/load.js';
import { noProxyCovers } from '../../src/config/proxy-settings.js';
import { parseBaseAddress } from '../../src/config/base-url.js';
import { makeKeys, type TestKeys } from '../support/keys.js';
import { productionEnv, refusal, secretFiles } from './support.js';

describe('config: the forward proxy (SIDECAR_UPSTREAM_PROXY_*, HTTPS_PROXY, NO_PROXY)', () => {
  let keys: TestKeys;
  let env: NodeJS.ProcessEnv;
  let passwordFile: string;
  let caFile: string;

  before(async () => {
    keys = await makeKeys(2048);
    ({ passwordFile, caFile } = await secretFiles(keys.dir, 'proxy', 'proxy-secret-pw'));
    env = productionEnv(keys.privateKeyFile);
  });

  const load = (extra: NodeJS.ProcessEnv) => loadConfig({ ...env, ...extra });

  it('is off by default: a direct connection, even with HTTPS_PROXY in the environment', () => {
    assert.equal(load({ HTTPS_PROXY: 'http://proxy.internal:3128' }).upstream.proxy, undefined);
  });

  it('reads the URL, the user and the password from its file without the trailing newline', () => {
    const proxy = load({
      SIDECAR_UPSTREAM_PROXY_URL: 'https://proxy.internal:3129',
      SIDECAR_UPSTREAM_PROXY_USERNAME: 'sidecar',
      SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: passwordFile,
      SIDECAR_UPSTREAM_PROXY_CA_FILE: caFile,
    }).upstream.proxy;
    assert.equal(proxy?.origin, 'https://proxy.internal:3129');
    assert.equal(proxy?.username, 'sidecar');
    assert.equal(proxy?.password?.reveal(), 'proxy-secret-pw');
    assert.match(proxy?.ca ?? '', /BEGIN CERTIFICATE/);
    assert.equal(
      load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy.internal' }).upstream.proxy?.origin,
      'http://proxy.internal:80',
    );
  });

  it('refuses credentials in the URL, without quoting it', () => {
    for (const url of [
      'http://user:secret-pw@proxy.internal:3128',
      'http://user@proxy.internal:3128',
      'http://@proxy:1',
    ]) {
      const message = refusal(
        () => load({ SIDECAR_UPSTREAM_PROXY_URL: url }),
        'SIDECAR_UPSTREAM_PROXY_URL',
        /username or password/,
      );
      assert.ok(!message.includes('secret-pw'));
    }
  });

  it('refuses other schemes, paths and queries', () => {
    refusal(() => load({ SIDECAR_UPSTREAM_PROXY_URL: 'socks5://proxy:1080' }), 'SIDECAR_UPSTREAM_PROXY_URL', /socks5/);
    refusal(() => load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy:3128/x' }), 'SIDECAR_UPSTREAM_PROXY_URL', /path/);
    refusal(() => load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy:3128?a=1' }), 'SIDECAR_UPSTREAM_PROXY_URL', /query/);
    refusal(() => load({ SIDECAR_UPSTREAM_PROXY_URL: 'proxy:3128' }), 'SIDECAR_UPSTREAM_PROXY_URL');
  });

  it('refuses the URL together with FROM_ENV, a user without a password file and the reverse', () => {
    refusal(
      () => load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy:3128', SIDECAR_UPSTREAM_PROXY_FROM_ENV: 'true' }),
      'SIDECAR_UPSTREAM_PROXY_URL',
      /both/,
    );
    refusal(
      () => load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy:3128', SIDECAR_UPSTREAM_PROXY_USERNAME: 'u' }),
      'SIDECAR_UPSTREAM_PROXY_USERNAME',
      /PASSWORD_FILE/,
    );
    refusal(
      () =>
        load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy:3128', SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE: passwordFile }),
      'SIDECAR_UPSTREAM_PROXY_PASSWORD_FILE',
      /USERNAME/,
    );
  });

  it('refuses proxy settings without a proxy, and a CA file for an http:// proxy', () => {
    refusal(() => load({ SIDECAR_UPSTREAM_PROXY_CA_FILE: caFile }), 'SIDECAR_UPSTREAM_PROXY_CA_FILE', /no proxy/);
    refusal(
      () => load({ SIDECAR_UPSTREAM_PROXY_URL: 'http://proxy:3128', SIDECAR_UPSTREAM_PROXY_CA_FILE: caFile }),
      'SIDECAR_UPSTREAM_PROXY_CA_FILE',
      /https:\/\/ proxy only/,
    );
  });

  it('FROM_ENV: HTTPS_PROXY (lowercase first), unless NO_PROXY covers the gateway', () => {
    const fromEnv = { SIDECAR_UPSTREAM_PROXY_FROM_ENV: 'true' };
    assert.equal(load({ ...fromEnv, HTTPS_PROXY: 'http://upper:3128' }).upstream.proxy?.origin, 'http://upper:3128');
    assert.equal(
      load({ ...fromEnv, HTTPS_PROXY: 'http://upper:3128', https_proxy: 'http://lower:3128' }).upstream.proxy?.origin,
      'http://lower:3128',
    );
    assert.equal(
      load({ ...fromEnv, HTTPS_PROXY: 'http://p:3128', NO_PROXY: '.example.com' }).upstream.proxy,
      undefined,
    );
    assert.equal(load({ ...fromEnv }).upstream.proxy, undefined, 'no variable set: direct');
    const message = refusal(
      () => load({ ...fromEnv, HTTPS_PROXY: 'http://u:hunter2@p:3128' }),
      'HTTPS_PROXY (SIDECAR_UPSTREAM_PROXY_FROM_ENV=true)',
      /username or password/,
    );
    assert.ok(!message.includes('hunter2'));
  });

  it('NO_PROXY follows undici: exact host, subdomains, leading dot or *., ports, and *', () => {
    const base = parseBaseAddress('https://api.gateway.example.com');
    assert.equal(noProxyCovers('api.gateway.example.com', base), true);
    assert.equal(noProxyCovers('example.com', base), true);
    assert.equal(noProxyCovers('.example.com', base), true);
    assert.equal(noProxyCovers('*.example.com', base), true);
    assert.equal(noProxyCovers('other.com, gateway.example.com:443', base), true);
    assert.equal(noProxyCovers('gateway.example.com:8443', base), false);
    assert.equal(noProxyCovers('ample.com', base), false);
    assert.equal(noProxyCovers('*', base), true);
    assert.equal(noProxyCovers('', base), false);
  });
});
