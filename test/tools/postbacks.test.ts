// `signing-sidecar postbacks`: bad usage is exit 2 with the reason and the usage, before any connection; a
// configuration without Redis is exit 1 saying where the inbox lives. (Against a real Redis: test/postback/inbox*.)
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { postbacks } from '../../src/cli/postbacks.js';
import { makeKeys } from '../support/keys.js';
import { sidecarEnv } from '../support/sidecar.js';
import { runCommand } from './run-command.js';

describe('signing-sidecar postbacks', () => {
  it('refuses bad usage with exit 2, the reason and the usage lines', async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /no action given/],
      [['purge'], /unknown action "purge"/],
      [['show'], /show needs a postback id/],
      [['replay'], /replay needs a postback id or --all/],
      [['drop', 'pb_123'], /"pb_123" is not a postback id/],
      [['list', 'pb_0123456789abcdef0123456789abcdef'], /list takes no id here/],
      [['list', '--limit', '0'], /--limit takes a positive whole number/],
      [['list', '--nope'], /Unknown option '--nope'/],
    ];
    for (const [argv, reason] of cases) {
      const run = await runCommand(postbacks, argv, {});
      assert.equal(run.code, 2, argv.join(' '));
      assert.match(run.stderr, reason);
      assert.match(run.stderr, /usage: signing-sidecar postbacks list/);
    }
  });

  it('--help prints what each action does and exits 0', async () => {
    const run = await runCommand(postbacks, ['--help'], {});
    assert.equal(run.code, 0);
    for (const action of ['list', 'show', 'replay', 'drop']) assert.match(run.stdout, new RegExp(`^  ${action} `, 'm'));
  });

  it('with the memory store: exit 1, the inbox lives in Redis', async () => {
    const env = await sidecarEnv(await makeKeys(), 'http://127.0.0.1:1');
    const run = await runCommand(postbacks, ['list'], env);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /the postback inbox lives in Redis/);
  });
});
