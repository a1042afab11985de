// The operator commands for accounts and keys, as real processes on a data
// folder; and `ipr start` (npm start) on a fresh machine's empty data folder.
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { AccountStore } from '../src/store/accounts.js';
import { cli, testDir } from './helpers.js';
import { check } from './server.js';

function ipr(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', input });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

t.test('accounts and keys from the command line', async (t) => {
  const data = path.join(testDir(t), 'data');
  const d = ['--data', data];
  t.match(ipr(['accounts', 'create', ...d, '--email', 'Ops@Example.com', '--plan', 'starter'], 'a long password\n'), {
    code: 0,
    stdout: 'created account ops@example.com (plan starter)\n',
  });
  t.match(ipr(['accounts', 'create', ...d, '--email', 'ops@example.com', '--plan', 'starter'], 'a long password\n'), { code: 1, stderr: /an account ops@example.com exists/ });
  t.match(ipr(['accounts', 'create', ...d, '--email', 'x@example.com', '--plan', 'platinum'], 'a long password\n'), { code: 2, stderr: /unknown plan "platinum" \(plans: free, starter, pro, enterprise\)/ });
  t.match(ipr(['accounts', 'create', ...d, '--email', 'x@example.com', '--plan', 'free'], 'short\n'), { code: 1, stderr: /needs 10 to 1024 characters/ });
  t.match(ipr(['accounts', 'create', ...d, '--email', 'not-an-email', '--plan', 'free'], 'a long password\n'), { code: 1, stderr: /not an email address/ });

  const one = ipr(['keys', 'create', ...d, '--account', 'ops@example.com', '--name', 'production']);
  t.equal(one.code, 0);
  const key = one.stdout.trim().split('\n').pop()!;
  t.match(key, /^ipr_[A-Za-z0-9_-]{43}$/, 'the key, alone on the last line of stdout');
  t.match(one.stderr, new RegExp(`created key ${key.slice(0, 8)} "production" for ops@example.com; it is shown once`));
  const many = ipr(['keys', 'create', ...d, '--account', 'ops@example.com', '--name', 'bulk', '--count', '5', '--allow', '10.0.0.0/8,2001:db8::/32']);
  const bulk = many.stdout.trim().split('\n');
  t.equal(bulk.length, 5, 'five keys, one per line');
  t.equal(new Set(bulk.map((k) => k.slice(0, 8))).size, 5, 'distinct prefixes');

  const list = ipr(['keys', 'list', ...d, '--account', 'ops@example.com']);
  t.equal(list.code, 0);
  t.match(list.stdout, /^prefix\s+name\s+created \(UTC\)\s+last used \(UTC\)\s+status\s+today\s+allowed from\n/);
  t.match(list.stdout, new RegExp(`${key.slice(0, 8)}\\s+production\\s+[0-9-]+ [0-9:]+\\s+never\\s+active\\s+0\\s+anywhere`));
  t.match(list.stdout, /bulk 3 .*10\.0\.0\.0\/8,2001:db8::\/32/);
  t.notOk(list.stdout.includes(key), 'a list never shows a key');

  t.match(ipr(['keys', 'revoke', ...d, '--account', 'ops@example.com', '--prefix', key.slice(0, 8)]), { code: 0, stdout: `revoked key ${key.slice(0, 8)} "production"\n` });
  t.match(ipr(['keys', 'list', ...d, '--account', 'ops@example.com']).stdout, new RegExp(`${key.slice(0, 8)}.*revoked`));
  t.match(ipr(['keys', 'revoke', ...d, '--account', 'ops@example.com', '--prefix', 'ipr_zzzz']), { code: 1, stderr: /no key ipr_zzzz in account ops@example.com/ });
  t.match(ipr(['keys', 'allow', ...d, '--account', 'ops@example.com', '--prefix', bulk[0]!.slice(0, 8), '--from', '']), { code: 0, stdout: /allowed from anywhere/ });
  t.match(ipr(['keys', 'allow', ...d, '--account', 'ops@example.com', '--prefix', bulk[0]!.slice(0, 8), '--from', '300.1.1.1']), { code: 1, stderr: /not an address or CIDR prefix: "300\.1\.1\.1"/ });

  t.match(ipr(['accounts', 'set-plan', ...d, '--email', 'ops@example.com', '--plan', 'pro']), { code: 0, stdout: 'ops@example.com: plan pro\n' });
  t.match(ipr(['accounts', 'suspend', ...d, '--email', 'ops@example.com']), { code: 0, stdout: 'ops@example.com: suspended\n' });
  t.match(ipr(['accounts', 'reactivate', ...d, '--email', 'ops@example.com']), { code: 0, stdout: 'ops@example.com: active\n' });
  t.match(ipr(['accounts', 'suspend', ...d, '--email', 'nobody@example.com']), { code: 1, stderr: /no account nobody@example.com/ });

  // Only digests are stored.
  const store = new AccountStore(data);
  t.teardown(() => store.close());
  const record = store.listKeys('ops@example.com')[0]!;
  t.match(record.hash, /^[0-9a-f]{64}$/);
  t.notOk(JSON.stringify(store.listKeys('ops@example.com')).includes(key.slice(8)));
  t.match(store.account('ops@example.com')!.passwordHash, /^scrypt\$16384\$8\$1\$/);
});

t.test('ipr start on an empty data folder: builds from the default sources, serves, says how to begin', async (t) => {
  const data = path.join(testDir(t), 'fresh');
  const child = spawn(process.execPath, [cli, 'start', '--data', data, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  t.teardown(() => child.kill('SIGKILL'));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(output)), 120_000);
    child.stdout.on('data', () => {
      const m = /serving http:\/\/[^:]+:([0-9]+)\/v1/.exec(output);
      if (m && output.includes('curl')) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
  });
  t.match(output, /no snapshot in .*fresh: building one from the default sources/);
  t.match(output, /asn-ipv4\s+asn\s+asn-csv\s+411,961/, 'the npm ASN data is built in');
  t.match(output, /geo-ipv4\s+geo\s+mmdb\s+6,324,784/, 'and DB-IP City Lite');
  t.match(output, /could not reach [0-9]+ sources: tor-exits, tor-exits-onionoo, vpn-ipv4,/, 'the upstream feeds this machine cannot reach are named');
  t.match(output, /echo 'a password of 10\+ characters' \| npx ipr accounts create/);
  t.match(output, /npx ipr keys create/);

  const store = new AccountStore(data);
  t.teardown(() => store.close());
  await store.createAccount('first@example.com', 'a long password', 'pro');
  const { key } = store.createKey('first@example.com', 'first');
  const r = await check(port, key, { ip: '8.8.8.8' });
  t.equal(r.status, 200);
  t.match(r.json, { ip: '8.8.8.8', asn: { number: 15169 }, location: { city: 'Mountain View' } });
  child.kill('SIGTERM');
  t.equal(await new Promise((resolve) => child.once('exit', resolve)), 0);
});
