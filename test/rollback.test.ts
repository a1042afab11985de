// `ipr rollback`: the snapshot before the published one answers again (in a
// running server too), updates hold until forced, and there is a clear error
// when nothing earlier is kept.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { feeds, runIpr, testDir } from './helpers.js';
import { accountStore, accountWithKey, check, startServer } from './server.js';

const VPN = { name: 'vpn', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') };
const TOR = { name: 'tor', kind: 'tor', format: 'tor-csv', path: path.join(feeds, 'tor/exits.csv') };
const PROXY = { name: 'proxies', kind: 'proxy', format: 'proxy-list', path: path.join(feeds, 'proxy/proxies.txt') };
const VPN_IP = '2.26.157.1';
const TOR_IP = '204.8.96.141';
const PROXY_IP = '144.31.222.106';

t.test('rollback publishes the previous snapshot, the server answers from it, updates hold until forced', async (t) => {
  const dir = testDir(t);
  const dataDir = path.join(dir, 'data');
  const sources = (name: string, list: object[]) => {
    const file = path.join(dir, `${name}.sources.json`);
    writeFileSync(file, JSON.stringify({ sources: list }));
    return file;
  };
  const build = async (file: string) => {
    const r = await runIpr('build', '--sources', file, '--data', dataDir, '--keep', '2');
    t.equal(r.code, 0, r.code === 0 ? `built ${path.basename(file)}` : r.stderr);
    return /snapshot: .*(snap-[^ ]+\.mdb)/.exec(r.stdout)![1];
  };
  const first = await build(sources('first', [VPN]));
  const second = await build(sources('second', [VPN, TOR]));
  const third = await build(sources('third', [VPN, TOR, PROXY]));

  const server = await startServer(t, { dataDir, workers: 1 });
  const key = await accountWithKey(accountStore(t, dataDir), 'ent@example.com', 'enterprise');
  const answer = async (ip: string) => (await check(server.port, key, { ip })).json;
  t.equal((await answer(PROXY_IP)).is_proxy, true, 'serving the third snapshot');

  const r = await runIpr('rollback', '--data', dataDir);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, new RegExp(`^ipr: published ${second} \\(built \\d{4}-\\d\\d-\\d\\dT[0-9:.]+Z\\) in place of ${third} \\(built [^)]+\\); updates are held`));
  t.match(JSON.parse((await runIpr('lookup', PROXY_IP, TOR_IP, '--data', dataDir)).stdout), [{ is_proxy: false }, { is_tor: true }]);
  let served = await answer(PROXY_IP);
  for (let waited = 0; served.is_proxy && waited < 5000; waited += 50) {
    await sleep(50);
    served = await answer(PROXY_IP);
  }
  t.equal(served.is_proxy, false, 'the server moved back to the second snapshot');
  t.equal((await answer(TOR_IP)).is_tor, true);

  const held = await runIpr('update', '--sources', sources('third', [VPN, TOR, PROXY]), '--data', dataDir);
  t.equal(held.code, 0);
  t.match(held.stdout, new RegExp(`^ipr: updates are held since the rollback of [^ ]+ \\(from ${third} to ${second}\\); "ipr update --force" builds anyway`));
  t.equal((await runIpr('info', '--data', dataDir)).stdout.includes(second), true, 'a held update publishes nothing');

  const again = await runIpr('rollback', '--data', dataDir);
  t.match(again.stdout, new RegExp(`published ${first} .* in place of ${second}`), 'a second rollback goes one further back');
  t.match(JSON.parse((await runIpr('lookup', TOR_IP, VPN_IP, '--data', dataDir)).stdout), [{ is_tor: false }, { is_vpn: true }]);
  const none = await runIpr('rollback', '--data', dataDir);
  t.equal(none.code, 1);
  t.match(none.stderr, new RegExp(`^ipr: .*snapshots: no snapshot older than ${first} is kept \\(--keep N keeps N\\)`));

  const forced = await runIpr('update', '--force', '--sources', sources('third', [VPN, TOR, PROXY]), '--data', dataDir, '--json');
  t.equal(forced.code, 0, forced.stderr);
  t.equal(JSON.parse(forced.stdout).result, 'published', '--force ends the hold');
  t.equal(JSON.parse((await runIpr('lookup', PROXY_IP, '--data', dataDir)).stdout).is_proxy, true);
  const next = await runIpr('update', '--sources', sources('third', [VPN, TOR, PROXY]), '--data', dataDir, '--json');
  t.equal(JSON.parse(next.stdout).result, 'unchanged', 'updates run again');
});

t.test('rollback with nothing published is an operator error', async (t) => {
  const r = await runIpr('rollback', '--data', path.join(testDir(t), 'empty'));
  t.equal(r.code, 1);
  t.match(r.stderr, /^ipr: .*empty\/snapshots: no snapshot is published/);
});
