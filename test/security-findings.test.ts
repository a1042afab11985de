// The findings of the outside review (issue 13), each as the attack that
// worked against a real server before its fix and no longer does. What each
// fix is and why: docs/RELIABILITY.md, "Outside review".
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { open } from 'lmdb';
import { startFeedServer, torLists } from '../bench/feed-server.js';
import { cli, feeds as feedsDir, runIpr, testDir } from './helpers.js';
import { accountStore, admin, adminAddress, check, dash, dataDirWithFullSnapshot, PASSWORD, request, samples, signIn, startServer } from './server.js';

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
  t.same(readdirSync(store).sort().map((f) => [f, mode(path.join(store, f))]), [['changes', '600'], ['data.mdb', '600'], ['lock.mdb', '600']], 'its files: 0600');

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

t.test('finding 7: allowed addresses written as IPv4-mapped IPv6 are IPv4 entries', async (t) => {
  // On ::, IPv4 clients arrive as IPv4-mapped IPv6 addresses.
  const server = await startServer(t, { workers: 1, args: ['--host', '::'] });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const from = (host: string) => (key: string) => check(server.port, key, { ip: '8.8.8.8' }, { host });
  const [v4, v6] = [from('127.0.0.1'), from('::1')];

  // An IPv4 /24 written as a mapped prefix with an IPv4 length: read as the IPv6 prefix ::/24, it let ::1 in.
  t.throws(() => store.createKey('ann@example.com', 'office', ['::ffff:203.0.113.0/24']), {
    code: 'invalid_argument',
    message: 'not an address or CIDR prefix: "::ffff:203.0.113.0/24" (an IPv4-mapped prefix needs a length of 96 to 128)',
  });
  const made = ipr(null, 'keys', 'create', '--data', server.dataDir, '--account', 'ann@example.com', '--name', 'office', '--allow', '::ffff:203.0.113.0/24');
  t.equal(made.code, 1, 'the CLI refuses it too');
  const office = store.createKey('ann@example.com', 'office', ['::ffff:203.0.113.0/120']);
  t.same(office.record.allowed, ['203.0.113.0/24'], 'stored as the IPv4 prefix it is');
  t.same([(await v6(office.key)).status, (await v4(office.key)).status], [403, 403], 'neither ::1 nor 127.0.0.1 is in 203.0.113.0/24');

  // A mapped loopback address: stored as 127.0.0.1, and a client at 127.0.0.1 (arriving as ::ffff:127.0.0.1) is it.
  const local = store.createKey('ann@example.com', 'local', ['::ffff:127.0.0.1']);
  t.same(local.record.allowed, ['127.0.0.1']);
  t.same([(await v4(local.key)).status, (await v6(local.key)).status], [200, 403], 'allowed from 127.0.0.1 only');

  // Prefixes of each family match their own family, host bits cleared.
  const both = store.createKey('ann@example.com', 'both', ['127.0.0.9/8', '::1/128']);
  t.same(both.record.allowed, ['127.0.0.0/8', '::1/128']);
  t.same([(await v4(both.key)).status, (await v6(both.key)).status], [200, 200]);
  const wide = store.createKey('ann@example.com', 'wide', ['::/1']);
  t.same([(await v4(wide.key)).status, (await v6(wide.key)).status], [403, 200], '::/1 holds ::1 and no IPv4 address');
  const mappedRange = store.createKey('ann@example.com', 'mapped range', ['::ffff:0:0/96']);
  t.same(mappedRange.record.allowed, ['0.0.0.0/0']);
  t.same([(await v4(mappedRange.key)).status, (await v6(mappedRange.key)).status], [200, 403], 'the mapped range is every IPv4 address');
});

t.test('finding 9: the admin port answers loopback host names only without a token; feed credentials never reach logs or HTTP', async (t) => {
  const feeds = await startFeedServer();
  t.teardown(() => feeds.close());
  feeds.route('/tor?token=SEKRIT-QUERY', { text: torLists(feedsDir).current });
  const dir = testDir(t);
  const sourcesFile = path.join(dir, 'feeds.sources.json');
  const writeSources = (extra: object[]) =>
    writeFileSync(sourcesFile, JSON.stringify({ sources: [{ name: 'tor-exits', kind: 'tor', format: 'cidr-list', url: feeds.url('/tor?token=SEKRIT-QUERY') }, ...extra] }));
  const secrets = /SEKRIT|hunter2/;
  writeSources([]);
  const first = await runIpr('update', '--sources', sourcesFile, '--data', path.join(dir, 'own'), '--json');
  t.equal(first.code, 0, first.stderr);
  t.notMatch(first.stdout + first.stderr, secrets, 'ipr update: no credential in its report');
  t.match(JSON.parse(first.stdout).sources[0].location, /^http:\/\/127\.0\.0\.1:[0-9]+\/tor\?REDACTED$/);
  // A failing download (the warning names the URL) and a URL with a user and password (fetch refuses it, quoting it).
  feeds.route('/tor?token=SEKRIT-QUERY', { status: 500 });
  writeSources([{ name: 'vpn', kind: 'vpn', format: 'cidr-list', url: feeds.url('/vpn').replace('http://', 'http://ops:hunter2@') }]);
  const second = await runIpr('update', '--sources', sourcesFile, '--data', path.join(dir, 'own'), '--json', '--retries', '0');
  t.equal(second.code, 1);
  t.match(second.stderr, /source vpn: http:\/\/REDACTED@127\.0\.0\.1:[0-9]+\/vpn: /, 'the failure names the source without its credentials');
  t.notMatch(second.stdout + second.stderr, secrets, 'no credential in the warnings or the error');
  t.notMatch((await runIpr('info', '--data', path.join(dir, 'own'))).stdout, secrets, 'nor in the snapshot');

  // A server with scheduled updates of those sources and an admin port without a token.
  const server = await startServer(t, { dataDir: path.join(dir, 'own'), workers: 1, args: ['--admin-port', '0', '--update-interval', '2s', '--sources', sourcesFile] });
  const { port } = adminAddress(server);
  for (let i = 0; i < 100 && !/"event":"update".*"result"/.test(server.output()); i++) await new Promise((resolve) => setTimeout(resolve, 200));
  t.match(server.output(), /"event":"update"/, 'the update ran');
  t.notMatch(server.output(), secrets, 'no credential in the server log');
  const asHost = (host: string) => admin(port, '/provenance', { headers: { host } });
  for (const host of ['evil.example', `evil.example:${port}`, 'localhost.evil.example', '127.0.0.1.nip.io']) {
    const r = await asHost(host);
    t.same([r.status, JSON.parse(r.text).error], [403, 'host_refused'], `Host: ${host} (DNS rebinding): refused`);
  }
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'LOCALHOST']) {
    const r = await asHost(host);
    t.equal(r.status, 200, `Host: ${host}`);
    t.notMatch(r.text, secrets, 'no credential in /provenance');
  }
  await server.stop();
  // With a token, the token decides, whatever the Host.
  const token = 'a-long-enough-admin-token';
  const tokened = await startServer(t, { dataDir: path.join(dir, 'own'), workers: 1, env: { IPR_ADMIN_TOKEN: token }, args: ['--admin-port', '0'] });
  t.equal((await admin(adminAddress(tokened).port, '/metrics', { token, headers: { host: 'metrics.internal.example' } })).status, 200);
});

t.test('finding 10: sign-up answers the same whether the email has an account or not', async (t) => {
  const server = await startServer(t, { workers: 1, args: ['--signup'] });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const answer = async (email: string) => {
    const r = await dash(server.port, 'POST', 'sign-up', null, { email, password: 'another good password' });
    const { date: _date, ...headers } = r.headers;
    return { status: r.status, headers, text: r.text };
  };
  const existing = await answer('ann@example.com');
  const fresh = await answer('new@example.com');
  t.same(existing, fresh, 'status, headers and body are the same');
  t.equal(existing.headers['set-cookie'], undefined, 'and neither signs in');
  t.equal(existing.status, 202);
  // The existing customer's account is untouched: the old password still signs in, the new one does not.
  t.ok(await signIn(server.port, 'ann@example.com', PASSWORD));
  t.equal((await dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password: 'another good password' })).status, 401);
  t.ok(await signIn(server.port, 'new@example.com', 'another good password'), 'the new account signs in with its password');
  t.match(server.output(), /"event":"sign_up_existing","account":"ann@example.com"/, 'the operator sees the attempt in the log');
});

t.test('finding 4: suspension ends sessions for good; sign out everywhere; password changes end the other sessions', async (t) => {
  const server = await startServer(t, { workers: 2 });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const alive = async (s: { id: string; csrf: string }) => (await dash(server.port, 'GET', 'account', s)).status === 200;

  // Suspended, then reactivated: the sessions from before stay ended.
  const before = await signIn(server.port, 'ann@example.com');
  t.equal(ipr(null, 'accounts', 'suspend', '--data', server.dataDir, '--email', 'ann@example.com').code, 0);
  t.notOk(await alive(before), 'suspended: signed out');
  t.equal(ipr(null, 'accounts', 'reactivate', '--data', server.dataDir, '--email', 'ann@example.com').code, 0);
  t.notOk(await alive(before), 'reactivated: the old session does not come back');

  // A password change in the dashboard: the old password is required, the other sessions end, this one goes on under a new id.
  const [laptop, phone] = [await signIn(server.port, 'ann@example.com'), await signIn(server.port, 'ann@example.com')];
  const wrong = await dash(server.port, 'PUT', 'password', laptop, { current: 'not the password', password: 'a brand new password' });
  t.same([wrong.status, wrong.json.error], [403, 'password_wrong'], 'the current password is required');
  const common = await dash(server.port, 'PUT', 'password', laptop, { current: PASSWORD, password: 'qwertyuiop' });
  t.same([common.status, common.json.message], [400, 'that password is one of the most common: choose another']);
  const noToken = await dash(server.port, 'PUT', 'password', laptop, { current: PASSWORD, password: 'a brand new password' }, { 'x-csrf-token': '' });
  t.equal(noToken.status, 403, 'a change: the CSRF token is required');
  t.ok((await alive(laptop)) && (await alive(phone)), 'nothing changed yet');
  const changed = await dash(server.port, 'PUT', 'password', laptop, { current: PASSWORD, password: 'a brand new password' });
  t.equal(changed.status, 200);
  const renewed = { id: /ipr_session=([A-Za-z0-9_-]{43});/.exec(String(changed.headers['set-cookie']))![1]!, csrf: changed.json.csrf_token as string };
  t.notOk(await alive(phone), 'the other session ended');
  t.notOk(await alive(laptop), 'the id the change came with ended too');
  t.ok(await alive(renewed), 'this browser goes on under a new id');
  t.equal((await dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD })).status, 401, 'the old password no longer signs in');

  // Sign out everywhere.
  const other = await signIn(server.port, 'ann@example.com', 'a brand new password');
  const everywhere = await dash(server.port, 'DELETE', 'sessions', renewed);
  t.equal(everywhere.status, 200);
  t.match(String(everywhere.headers['set-cookie']), /^ipr_session=; .*Max-Age=0$/);
  t.same([await alive(renewed), await alive(other)], [false, false], 'every session ended');

  // The operator's command: the password on standard input; every session ends.
  const last = await signIn(server.port, 'ann@example.com', 'a brand new password');
  t.same(ipr('1234567890\n', 'accounts', 'set-password', '--data', server.dataDir, '--email', 'ann@example.com'), { code: 1, stdout: '', stderr: 'ipr: that password is one of the most common: choose another\n' });
  t.ok(await alive(last), 'a refused password changes nothing');
  t.same(ipr('set by the operator\n', 'accounts', 'set-password', '--data', server.dataDir, '--email', 'ann@example.com'), {
    code: 0,
    stdout: 'ann@example.com: password set; every dashboard session ended\n',
    stderr: '',
  });
  t.notOk(await alive(last));
  t.ok(await signIn(server.port, 'ann@example.com', 'set by the operator'));
});

/** `ipr keys create` on a data folder: the key, or null when refused (with the message). */
function cliKey(dataDir: string, email: string, name: string): { key: string | null; stderr: string } {
  const r = ipr(null, 'keys', 'create', '--data', dataDir, '--account', email, '--name', name);
  return { key: r.code === 0 ? r.stdout.trim() : null, stderr: r.stderr };
}

t.test('finding 3: the limit table is never exhausted into 500s; slots of revoked keys are reused, fresh; daily caps', async (t) => {
  const dataDir = dataDirWithFullSnapshot(t);
  const server = await startServer(t, { dataDir, workers: 2, args: ['--max-keys', '4', '--admin-port', '0', '--signup', '--trust-proxy', '--max-signups-per-day', '2', '--max-keys-per-day', '2'] });
  const store = accountStore(t, dataDir);
  await store.createAccount('ops@example.com', PASSWORD, 'free'); // 100 a day
  const keys = [0, 1, 2, 3].map((i) => cliKey(dataDir, 'ops@example.com', `k${i}`).key!);
  t.ok(keys.every((k) => k !== null), 'four keys fill the table of four');
  const fifth = cliKey(dataDir, 'ops@example.com', 'k4');
  t.same(fifth, { key: null, stderr: 'ipr: no key can be made: all 4 key slots of this data folder are taken (revoke keys, or restart ipr serve with a larger --max-keys)\n' }, 'a fifth key is refused, clearly');
  for (const key of keys) t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200, 'every key made answers (none is past the table)');

  // A revoked key's slot is reused, and the new key starts from nothing: in the running server's table and in the stored usage.
  const old = keys[1]!;
  let before = null as unknown as Awaited<ReturnType<typeof check>>;
  for (let i = 0; i < 5; i++) before = await new Promise((resolve) => setTimeout(resolve, 1000)).then(() => check(server.port, old, { ip: '8.8.8.8' })); // free: 1 a second
  t.same([before.status, before.headers['x-ratelimit-remaining']], [200, '94'], 'the old key used 6 of its 100');
  t.equal(ipr(null, 'keys', 'revoke', '--data', dataDir, '--account', 'ops@example.com', '--prefix', old.slice(0, 8)).code, 0);
  const reused = cliKey(dataDir, 'ops@example.com', 'k5').key!;
  t.ok(reused, 'a key can be made again');
  const oldRecord = store.listKeys('ops@example.com').find((k) => k.prefix === old.slice(0, 8))!;
  const newRecord = store.listKeys('ops@example.com').find((k) => k.prefix === reused.slice(0, 8))!;
  t.equal(newRecord.slot, oldRecord.slot, 'in the revoked key\'s slot');
  t.not(newRecord.id, oldRecord.id, 'under an id of its own');
  const first = await check(server.port, reused, { ip: '8.8.8.8' });
  t.same([first.status, first.headers['x-ratelimit-remaining']], [200, '99'], 'its first request: 99 left, not 93');
  t.equal((await check(server.port, old, { ip: '8.8.8.8' })).status, 401, 'the old key is revoked');
  await new Promise((resolve) => setTimeout(resolve, 1300)); // usage is written every second
  const today = new Date().toISOString().slice(0, 10);
  t.same([store.usage(oldRecord.id, today), store.usage(newRecord.id, today)], [6, 1], 'stored usage: each key its own');
  const s = await signIn(server.port, 'ops@example.com');
  const usage = (await dash(server.port, 'GET', 'usage', s)).json;
  t.same(
    usage.keys.map((k: { prefix: string; requests: number[] }) => [k.prefix, k.requests.at(-1)]).sort(),
    [[keys[0]!.slice(0, 8), 1], [keys[2]!.slice(0, 8), 1], [keys[3]!.slice(0, 8), 1], [old.slice(0, 8), 6], [reused.slice(0, 8), 1]].sort(),
    'the dashboard too',
  );
  // After a restart the counts come back to their own keys.
  await server.stop();
  const again = await startServer(t, { dataDir, workers: 2, args: ['--admin-port', '0', '--signup', '--trust-proxy', '--max-signups-per-day', '2', '--max-keys-per-day', '2'] });
  t.equal((await check(again.port, reused, { ip: '8.8.8.8' })).headers['x-ratelimit-remaining'], '98', 'the size of the table is the data folder\'s: 4 still');
  t.match(ipr(null, 'keys', 'create', '--data', dataDir, '--account', 'ops@example.com', '--name', 'k6'), { code: 1, stderr: /all 4 key slots/ });

  // The dashboard keeps the last tenth of the table (here one slot) for the operator.
  t.equal(ipr(null, 'keys', 'revoke', '--data', dataDir, '--account', 'ops@example.com', '--prefix', keys[0]!.slice(0, 8)).code, 0);
  t.equal(ipr(null, 'keys', 'revoke', '--data', dataDir, '--account', 'ops@example.com', '--prefix', keys[2]!.slice(0, 8)).code, 0);
  const s2 = await signIn(again.port, 'ops@example.com');
  t.equal((await dash(again.port, 'POST', 'keys', s2, { name: 'dash 1' })).status, 201, 'the dashboard may take slot 3 of 4');
  const full = await dash(again.port, 'POST', 'keys', s2, { name: 'dash 2' });
  t.same([full.status, full.json.error], [409, 'key_slots_full'], 'not the last one');
  t.ok(cliKey(dataDir, 'ops@example.com', 'ops').key, 'which the CLI can still take');

  // Global daily caps: sign-ups (here 2 a day, from any addresses) and keys made in the dashboard (2 a day).
  const signUp = (i: number) => dash(again.port, 'POST', 'sign-up', null, { email: `s${i}@example.com`, password: PASSWORD }, { 'x-forwarded-for': `198.51.100.${i}` });
  t.same([(await signUp(1)).status, (await signUp(2)).status], [202, 202]);
  const capped = await signUp(3);
  t.same([capped.status, capped.json.error], [429, 'signup_limited'], 'a third sign-up in the day, from a third address');
  t.equal(store.account('s3@example.com'), undefined);
  t.equal(ipr(null, 'keys', 'revoke', '--data', dataDir, '--account', 'ops@example.com', '--prefix', reused.slice(0, 8)).code, 0);
  const s3 = await signIn(again.port, 's1@example.com');
  const capKey = await dash(again.port, 'POST', 'keys', s3, { name: 'x' });
  t.same([capKey.status, capKey.json.error], [409, 'key_limit'], 'a third key made in the dashboard today (the first was by ops)');
  t.match(capKey.json.message, /this server makes at most 2 keys a day in the dashboard/);

  // The operator sees it all on the admin port.
  const m = samples((await admin(adminAddress(again).port, '/metrics')).text);
  t.same(
    [m.get('ipr_key_slots{state="capacity"}'), m.get('ipr_key_slots{state="used"}')],
    [4, 3],
    'slots: capacity and used (the last key made was revoked since)',
  );
  t.equal(m.get('ipr_key_creations_refused_total{reason="key_slots"}'), 3, 'refused for want of a slot: the CLI twice, the dashboard once');
  t.equal(m.get('ipr_key_creations_refused_total{reason="keys_per_day"}'), 1);
  t.equal(m.get('ipr_signups_refused_total{reason="signups_per_day"}'), 1);
});

t.test('finding 2: nobody can lock a customer out of the dashboard, and guessing stays expensive', async (t) => {
  const server = await startServer(t, { workers: 2, args: ['--trust-proxy'] });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const attempt = async (password: string, from: string) => {
    const started = Date.now();
    const r = await dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password }, { 'x-forwarded-for': from });
    return { status: r.status, error: r.json?.error as string | undefined, retryAfter: r.json?.details?.retry_after as number | undefined, ms: Date.now() - started };
  };
  // The attack: wrong passwords for ann from 20 addresses (IPv4 and IPv6 /64s), all at once.
  const attackers = [...Array.from({ length: 12 }, (_, i) => `203.0.113.${i + 1}`), ...Array.from({ length: 8 }, (_, i) => `2001:db8:${i}::1`)];
  const wrong = await Promise.all(attackers.map((from) => attempt('not the password', from)));
  t.same(wrong.map((r) => r.status), new Array(20).fill(401), '20 wrong passwords, each checked');

  // The owner, from an address that has not failed: signed in (after the account's delay), not refused.
  const [owner, fresh, ...failing] = await Promise.all([
    attempt(PASSWORD, '198.51.100.7'),
    attempt('another guess', '203.0.113.200'),
    ...attackers.slice(0, 3).map((from) => attempt('another guess', from)),
  ]);
  t.equal(owner.status, 200, 'the right password from a clean address signs in');
  t.ok(owner.ms >= 7000, `after the account's delay of 8 s (${owner.ms} ms)`);
  // An attacker spreading guesses over addresses still pays per account.
  t.same([fresh.status, fresh.ms >= 7000], [401, true], `a guess from a new address waits too (${fresh.ms} ms)`);
  t.same(
    failing.map((r) => [r.status, r.error]).sort(),
    [[401, 'sign_in_failed'], [429, 'sign_in_limited'], [429, 'sign_in_limited']],
    'addresses that have failed share the account\'s turns: one guess per 8 s, the others refused',
  );
  t.ok(failing.filter((r) => r.status === 429).every((r) => r.retryAfter! >= 1 && r.retryAfter! <= 8), 'and told when the next turn is');

  // One address is still stopped hard after 5 attempts on the account, even with the right password.
  const other = await signIn(server.port, 'ann@example.com', PASSWORD, { 'x-forwarded-for': '198.51.100.8' });
  t.ok(other.id, 'another clean address: signed in as well');
  await store.createAccount('bob@example.com', PASSWORD, 'pro');
  const bob = (password: string) => dash(server.port, 'POST', 'session', null, { email: 'bob@example.com', password }, { 'x-forwarded-for': '192.0.2.9' });
  for (let i = 0; i < 5; i++) t.equal((await bob('not the password')).status, 401);
  const stopped = await bob(PASSWORD);
  t.same([stopped.status, stopped.json.details.retry_after], [429, 900], 'the 6th attempt from that address: refused for 15 minutes');
  t.equal((await dash(server.port, 'POST', 'session', null, { email: 'bob@example.com', password: PASSWORD }, { 'x-forwarded-for': '192.0.2.10' })).status, 200, 'bob from elsewhere: in');
});
