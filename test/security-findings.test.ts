// The findings of the outside review (issue 13), each as the attack that
// worked against a real server before its fix and no longer does. What each
// fix is and why: docs/RELIABILITY.md, "Outside review".
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { cli, testDir } from './helpers.js';
import { open } from 'lmdb';
import { accountStore, check, dash, dataDirWithFullSnapshot, PASSWORD, request, signIn, startServer } from './server.js';

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

t.test('finding 5: look-alike and control-character emails are refused or are the same mailbox', async (t) => {
  const server = await startServer(t, { workers: 1, args: ['--signup'] });
  const signUp = (email: string) => dash(server.port, 'POST', 'sign-up', null, { email, password: PASSWORD });
  t.ok([201, 202].includes((await signUp('a@example.com')).status), 'the first account');
  for (const [what, email] of [
    ['a zero-width space', 'a\u200b@example.com'],
    ['a Cyrillic a in the local part', '\u0430@example.com'],
    ['a NUL', 'a\u0000@example.com'],
    ['an ANSI escape', '\u001b[31ma@example.com'],
    ['a right-to-left override', 'a@example.com\u202e'],
    ['a soft hyphen', 'a@exam\u00adple.com'],
  ]) {
    const r = await signUp(email!);
    t.same([r.status, r.json.error], [400, 'invalid_request'], `${what}: refused`);
  }
  // One mailbox, one account: forms of the same address that NFKC and case folding make equal.
  for (const email of ['A@EXAMPLE.COM', '\uff41@example.com', 'a@\uff45xample.com', ' a@example.com ']) await signUp(email);
  // A domain in NFC and in NFD is one domain (stored as its ASCII, punycode form); a Cyrillic one is another, and shows as such.
  await signUp('b@ex\u00e9mple.com');
  await signUp('b@exe\u0301mple.com');
  await signUp('b@ex\u0430mple.com');
  const list = ipr(null, 'accounts', 'list', '--data', server.dataDir);
  t.equal(list.code, 0);
  t.same(
    list.stdout.trim().split('\n').slice(1).map((line) => line.split(/\s+/)[0]),
    ['a@example.com', 'b@xn--exmple-4nf.com', 'b@xn--exmple-cva.com'],
    'three accounts: every look-alike refused or folded, the Cyrillic domain visibly apart',
  );
});

t.test('finding 6: names and emails cannot rewrite the operator\'s terminal', async (t) => {
  const server = await startServer(t, { workers: 1 });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const s = await signIn(server.port, 'ann@example.com');
  for (const [what, name] of [
    ['an OSC title sequence', '\u001b]0;pwned\u0007prod'],
    ['a cursor movement', 'prod\u001b[2A\u001b[2K'],
    ['a right-to-left override', 'dorp\u202e'],
    ['a C1 control', 'prod\u009b31m'],
    ['a zero-width joiner', 'pr\u200dod'],
  ]) {
    const r = await dash(server.port, 'POST', 'keys', s, { name });
    t.same([r.status, r.json], [400, { error: 'invalid_request', message: 'a key name cannot hold control or format characters', details: {} }], `${what}: refused`);
  }
  t.same(store.listKeys('ann@example.com'), [], 'no key made');
  t.equal(ipr(null, 'keys', 'create', '--data', server.dataDir, '--account', 'ann@example.com', '--name', 'x\u001b[2Jy').code, 1, 'nor by the CLI');

  // A store written before the fix may hold such names: every command prints them escaped.
  const { record } = store.createKey('ann@example.com', 'old');
  const raw = open({ path: path.join(server.dataDir, 'accounts'), maxDbs: 16 });
  t.teardown(() => raw.close());
  const keys = raw.openDB({ name: 'keys' });
  await keys.put(record.hash, { ...record, name: 'old\u001b]0;pwned\u0007\u001b[2K\u202e' });
  for (const args of [['keys', 'list', '--account', 'ann@example.com'], ['accounts', 'list'], ['keys', 'revoke', '--account', 'ann@example.com', '--prefix', record.prefix]]) {
    const out = ipr(null, ...args, '--data', server.dataDir);
    t.equal(out.code, 0, args.join(' '));
    t.notMatch(out.stdout + out.stderr, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/u, `${args.slice(0, 2).join(' ')}: nothing a terminal acts on`);
    if (args[0] === 'keys') t.match(out.stdout, 'old\\x1b]0;pwned\\x07\\x1b[2K\\u202e', 'the name, escaped');
  }
});

t.test('finding 8: passwords are counted in code points; blank and very common ones are refused', async (t) => {
  const server = await startServer(t, { workers: 1, args: ['--signup'] });
  const data = path.join(testDir(t), 'cli');
  for (const [what, password, message] of [
    ['ten spaces', ' '.repeat(10), 'a password cannot be only spaces'],
    ['tabs and spaces', '\t \t \t \t \t \u3000', 'a password cannot be only spaces'],
    ['five emoji (ten UTF-16 units)', '\u{1F511}'.repeat(5), 'a password needs 10 to 1024 characters'],
    ['a common one', '1234567890', 'that password is one of the most common: choose another'],
    ['a common one in capitals', 'QwertyUiop', 'that password is one of the most common: choose another'],
    ['another', 'Password123', 'that password is one of the most common: choose another'],
  ] as const) {
    const r = await dash(server.port, 'POST', 'sign-up', null, { email: 'new@example.com', password });
    t.same([r.status, r.json], [400, { error: 'invalid_request', message, details: {} }], `sign-up, ${what}: refused`);
    const made = ipr(`${password}\n`, 'accounts', 'create', '--data', data, '--email', 'ops@example.com', '--plan', 'pro');
    t.same([made.code, made.stderr], [1, `ipr: ${message}\n`], `ipr accounts create, ${what}: refused`);
  }
  t.equal(accountStore(t, server.dataDir).account('new@example.com'), undefined, 'no account made');
  // Ten code points, whatever their UTF-16 length, and uncommon: taken.
  t.equal(ipr('\u{1F511}\u{1F511}\u{1F511}\u{1F511}\u{1F511}ocean\n', 'accounts', 'create', '--data', data, '--email', 'ops@example.com', '--plan', 'pro').code, 0);
});
