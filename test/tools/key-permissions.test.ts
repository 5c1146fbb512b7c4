import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { keyPermissions } from '../../src/tools/key-permissions.js';
import { scratchDir } from '../support/scratch.js';

describe('check: key file permissions', () => {
  const file = async (mode: number) => {
    const path = join(scratchDir('key-perm-'), 'key.pem');
    await writeFile(path, 'x');
    await chmod(path, mode);
    return path;
  };

  it('owner-only (0600, 0400) passes', async () => {
    for (const mode of [0o600, 0o400]) assert.equal((await keyPermissions(await file(mode))).mark, '✔');
  });
  it("group-readable by the process's own group and nobody else (a Kubernetes fsGroup Secret, 0440) passes", async () => {
    const result = await keyPermissions(await file(0o440));
    assert.equal(result.mark, '✔', result.detail);
    assert.match(result.detail, /fsGroup/);
  });
  it('readable by others warns, with the fix', async () => {
    for (const mode of [0o644, 0o604]) {
      const result = await keyPermissions(await file(mode));
      assert.equal(result.mark, '!');
      assert.match(result.detail, /chmod 600/);
    }
  });
});
