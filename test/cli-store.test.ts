// The customer commands on a Redis store (IPR_STORE, --store) from two data
// folders, as two nodes' operators would run them: the same customers from
// both, none in either data folder; and a backup refused for Redis.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { cli, testDir } from './helpers.js';
import { startRedis } from './redis.js';

function ipr(args: string[], env: Record<string, string>, input?: string) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', input, env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

t.test('accounts and keys through IPR_STORE, from two data folders', async (t) => {
  const redis = await startRedis(t);
  const one = ['--data', path.join(testDir(t), 'one')];
  const two = ['--data', path.join(testDir(t), 'two')];
  const shared = { IPR_STORE: `${redis.url}?prefix=cli:` };

  t.match(ipr(['accounts', 'create', ...one, '--email', 'Ops@Example.com', '--plan', 'starter'], shared, 'a long password\n'), {
    code: 0,
    stdout: 'created account ops@example.com (plan starter)\n',
  });
  t.match(ipr(['accounts', 'create', ...two, '--email', 'ops@example.com', '--plan', 'pro'], shared, 'a long password\n'), {
    code: 1,
    stderr: /an account ops@example.com exists/,
  });
  t.match(ipr(['accounts', 'list', ...two], shared), { code: 0, stdout: /ops@example\.com\s+starter\s+active\s+[0-9-]+ [0-9:]+\s+0\n/ });

  const made = ipr(['keys', 'create', ...one, '--account', 'ops@example.com', '--name', 'production', '--count', '2'], shared);
  t.equal(made.code, 0, made.stderr);
  const [first, second] = made.stdout.trim().split('\n') as [string, string];
  t.match(first, /^ipr_[A-Za-z0-9_-]{43}$/);
  const listed = ipr(['keys', 'list', ...two, '--account', 'ops@example.com'], shared);
  t.match(listed.stdout, new RegExp(`${first.slice(0, 8)}\\s+production 1\\s+[0-9-]+ [0-9:]+\\s+never\\s+active\\s+0\\s+anywhere`), 'the keys made from one, listed from two');
  t.match(listed.stdout, new RegExp(`${second.slice(0, 8)}\\s+production 2`));

  t.match(ipr(['keys', 'revoke', ...two, '--account', 'ops@example.com', '--prefix', first.slice(0, 8)], shared), { code: 0, stdout: `revoked key ${first.slice(0, 8)} "production 1"\n` });
  t.match(ipr(['keys', 'list', ...one, '--account', 'ops@example.com'], shared).stdout, new RegExp(`${first.slice(0, 8)}.*revoked`), 'revoked from two, seen from one');
  t.match(ipr(['keys', 'allow', ...one, '--account', 'ops@example.com', '--prefix', second.slice(0, 8), '--from', '10.0.0.0/8'], shared), { code: 0, stdout: /allowed from 10\.0\.0\.0\/8/ });
  t.match(ipr(['accounts', 'suspend', ...two, '--email', 'ops@example.com'], shared), { code: 0, stdout: 'ops@example.com: suspended\n' });
  t.match(ipr(['accounts', 'list', ...one], shared).stdout, /ops@example\.com\s+starter\s+suspended\s+.*\s1\n/);

  // --store names the store too; without either the data folder's own store, which holds none of these customers.
  t.match(ipr(['keys', 'list', ...one, '--store', shared.IPR_STORE, '--account', 'ops@example.com'], {}).stdout, new RegExp(second.slice(0, 8)));
  t.match(ipr(['keys', 'list', ...one, '--account', 'ops@example.com'], { IPR_STORE: '' }), { code: 1, stderr: /no account ops@example.com/ });
  t.notOk(existsSync(path.join(two[1]!, 'accounts')), 'no LMDB store was made in a data folder while Redis served');

  t.match(ipr(['accounts', 'backup', ...one, '--out', path.join(testDir(t), 'backup')], { IPR_STORE: 'redis://ops:topsecret@127.0.0.1:1' }), {
    code: 1,
    stderr: /customers here are in Redis \(redis:\/\/ops:\*\*\*@127\.0\.0\.1:1\): back it up with Redis's own tools/,
  });
  t.match(ipr(['keys', 'list', ...one, '--account', 'ops@example.com'], { IPR_STORE: 'http://nowhere' }), { code: 1, stderr: /store URL http:\/\/nowhere: not a store URL/ });
});
