// The findings of the outside review (issue 13), each as the attack that
// worked against a real server before its fix and no longer does. What each
// fix is and why: docs/RELIABILITY.md, "Outside review".
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { cli, testDir } from './helpers.js';
import { check, dataDirWithFullSnapshot, PASSWORD, request, startServer } from './server.js';

/** Runs `ipr` with `input` on stdin. */
function ipr(input: string | null, ...args: string[]) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', input: input ?? undefined });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The permission bits of a file, as the octal text ls shows. */
function mode(file: string): string {
  return (statSync(file).mode & 0o777).toString(8).padStart(3, '0');
}

t.test('finding 1: the account store, the access log and the admin token are readable by their owner only', async (t) => {
  process.umask(0o022); // the usual default: files the code does not protect come out 644
  // A new data folder: the store made by the CLI.
  const fresh = path.join(testDir(t), 'fresh');
  t.equal(ipr(PASSWORD, 'accounts', 'create', '--data', fresh, '--email', 'ann@example.com', '--plan', 'pro').code, 0);
  const store = path.join(fresh, 'accounts');
  t.equal(mode(store), '700', 'the store folder: 0700');
  t.same(readdirSync(store).sort().map((f) => [f, mode(path.join(store, f))]), [['data.mdb', '600'], ['lock.mdb', '600']], 'its files: 0600');

  // A store made before (world-readable) is tightened when opened, with a line saying so.
  chmodSync(store, 0o755);
  for (const f of readdirSync(store)) chmodSync(path.join(store, f), 0o644);
  const list = ipr(null, 'keys', 'list', '--data', fresh, '--account', 'ann@example.com');
  t.equal(list.code, 0);
  t.same([mode(store), mode(path.join(store, 'data.mdb')), mode(path.join(store, 'lock.mdb'))], ['700', '600', '600'], 'tightened on open');
  t.match(list.stderr, `ipr: ${store} was readable by others (mode 755): now 700`);
  t.match(list.stderr, `ipr: ${path.join(store, 'data.mdb')} was readable by others (mode 644): now 600`);

  // The server: the same on its store; the access log made 0600, an old one tightened.
  const dataDir = dataDirWithFullSnapshot(t, 'served');
  mkdirSync(path.join(dataDir, 'accounts'), { mode: 0o755 });
  const accessLog = path.join(testDir(t), 'access.log');
  writeFileSync(accessLog, '', { mode: 0o644 });
  const server = await startServer(t, { dataDir, workers: 1, args: ['--access-log', accessLog] });
  t.equal(mode(path.join(dataDir, 'accounts')), '700');
  t.equal(mode(accessLog), '600', 'the access log: 0600');
  t.match(server.output(), /"msg":"[^"]*accounts was readable by others \(mode 755\): now 700"/, 'logged');
  t.equal((await check(server.port, 'ipr_none', { ip: '8.8.8.8' })).status, 401, 'and it serves');
  await server.stop();
  const newLog = path.join(testDir(t), 'new-access.log');
  const again = await startServer(t, { dataDir, workers: 1, args: ['--access-log', newLog] });
  await check(again.port, null, { ip: '8.8.8.8' });
  await again.stop();
  t.equal(mode(newLog), '600', 'a new access log: 0600');

  // An admin token file others can read is refused, as ssh refuses such a private key.
  const tokenFile = path.join(testDir(t), 'admin-token');
  writeFileSync(tokenFile, 'a-long-enough-admin-token\n', { mode: 0o644 });
  const args = ['--admin-port', '0', '--admin-token-file', tokenFile];
  await t.rejects(startServer(t, { dataDir, workers: 1, args }), { message: new RegExp(`--admin-token-file ${tokenFile} is readable by others \\(mode 644\\): chmod 600 it`) });
  chmodSync(tokenFile, 0o600);
  const tokened = await startServer(t, { dataDir, workers: 1, args });
  t.match(tokened.output(), /admin port http:/, 'a 0600 token file is taken');
});

t.test('finding 11: /dashboard/__proto__ and /dashboard/constructor are unknown pages', async (t) => {
  const server = await startServer(t, { workers: 1 });
  for (const page of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
    const r = await request(server.port, `/dashboard/${page}`, { method: 'GET' });
    t.same([r.status, r.headers['content-type'], r.headers.location], [404, 'text/html; charset=utf-8', undefined], `/dashboard/${page}: 404, as any unknown path`);
  }
});
