// `ipr accounts backup` and the restore of docs/DEPLOY.md: a copy of the
// account store made while a server answers and counts requests and the
// dashboard and the CLI change it; restored into another data folder, a
// server there knows the accounts, keys and counts of the moment of the
// backup, and nothing after it. Debian's mdb_copy, the usual tool for a live
// LMDB copy, cannot read the store (lmdb-js writes a newer format), which is
// why the command exists.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { cli, fullDataDir, runIpr, testDir } from './helpers.js';
import { accountStore, accountWithKey, check, dataDirWithFullSnapshot, startServer } from './server.js';

t.test('a backup made under load restores the store as it was at that moment', async (t) => {
  const dir = testDir(t);
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const kept = await accountWithKey(store, 'kept@example.com', 'pro');
  for (let i = 0; i < 5; i++) t.equal((await check(server.port, kept, { ip: '8.8.8.8' })).status, 200);
  await new Promise((resolve) => setTimeout(resolve, 1500)); // the server writes its counts every second

  // Requests and new keys keep coming while the backup is made.
  let load = true;
  const traffic = (async () => {
    let n = 0;
    while (load) {
      await check(server.port, kept, { ip: '1.1.1.1' });
      if (n++ % 10 === 0) store.createKey('kept@example.com', `during ${n}`);
    }
  })();
  const backup = path.join(dir, 'backup-1');
  const made = await runIpr('accounts', 'backup', '--out', backup, '--data', server.dataDir);
  load = false;
  await traffic;
  t.equal(made.code, 0, made.stderr);
  t.match(made.stdout, /^backed up the account store of .* to .*backup-1\/data\.mdb \([0-9.]+ KiB\)\n$/);
  t.same(readdirSync(backup), ['data.mdb']);
  const after = await accountWithKey(store, 'after@example.com', 'pro');

  // The restore of docs/DEPLOY.md, into another data folder: the store's folder gets the backup's data.mdb.
  const restored = dataDirWithFullSnapshot(t, 'restored');
  mkdirSync(path.join(restored, 'accounts'));
  copyFileSync(path.join(backup, 'data.mdb'), path.join(restored, 'accounts', 'data.mdb'));
  const second = await startServer(t, { dataDir: restored });
  t.equal((await check(second.port, kept, { ip: '8.8.8.8' })).status, 200, 'a key of the backup works');
  t.equal((await check(second.port, after, { ip: '8.8.8.8' })).status, 401, 'a key made after it does not');
  const list = spawnSync(process.execPath, [cli, 'keys', 'list', '--account', 'kept@example.com', '--data', restored], { encoding: 'utf8' });
  t.equal(list.status, 0);
  const today = Number(/^ipr_[^\s]+\s+test key\s+\S+ \S+\s+\S+ \S+\s+active\s+([0-9]+)/m.exec(list.stdout)?.[1]);
  t.ok(today >= 5, `the counts written before the backup are in it (${today} today)`);
});

t.test('refusals: no --out, an existing folder, no store; nothing half-written', async (t) => {
  const dir = testDir(t);
  const ipr = (...args: string[]) => spawnSync(process.execPath, [cli, 'accounts', 'backup', ...args], { encoding: 'utf8' });
  t.match(ipr('--data', fullDataDir), { status: 2, stderr: /accounts backup needs --out DIR/ });
  mkdirSync(path.join(dir, 'taken'));
  const data = dataDirWithFullSnapshot(t);
  await accountWithKey(accountStore(t, data), 'a@example.com', 'free');
  t.match(ipr('--out', path.join(dir, 'taken'), '--data', data), { status: 1, stderr: /taken exists; a backup goes into a new folder/ });
  t.match(ipr('--out', path.join(dir, 'none'), '--data', path.join(dir, 'empty')), { status: 1, stderr: /empty\/accounts\/data\.mdb does not exist: no account store to back up/ });
  t.notOk(existsSync(path.join(dir, 'empty')), 'no store was made to back up');
  t.same(readdirSync(dir).filter((f) => f.includes('partial')), [], 'no partial folder left');
});

t.test("Debian's mdb_copy cannot read the store", async (t) => {
  const data = dataDirWithFullSnapshot(t);
  await accountWithKey(accountStore(t, data), 'a@example.com', 'free');
  const r = spawnSync('mdb_copy', [path.join(data, 'accounts'), path.join(testDir(t), 'copy')], { encoding: 'utf8' });
  t.not(r.status, 0);
  t.match(r.stderr, /MDB_INVALID|MDB_VERSION_MISMATCH/);
});
