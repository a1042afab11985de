// The security review of issue 6, each point checked: secrets stored only
// as digests (the store's raw bytes searched), compared without early exit,
// never in logs, URLs or error bodies over a whole session of API, dashboard
// and CLI use; sessions that cannot be planted and CSRF tokens bound to
// theirs; framing and sniffing refused on every kind of dashboard answer;
// names shown as data; customers kept apart. test/dashboard-api.test.ts has
// the dashboard's own cases (rotation, expiry, limits, headers on pages).
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { keyDigest } from '../src/store/accounts.js';
import { Sessions } from '../src/dashboard/sessions.js';
import { cli, root } from './helpers.js';
import { accountStore, check, dash, exchange, PASSWORD, request, signIn, startServer, type Reply, type Signed } from './server.js';

/** Every file of the account store, as bytes. */
function storeBytes(dataDir: string): Buffer {
  const dir = path.join(dataDir, 'accounts');
  return Buffer.concat(readdirSync(dir).map((f) => readFileSync(path.join(dir, f))));
}

/** The forms a secret could be stored or logged in: its text, and for a key its part after the prefix and its 32 random bytes. */
function forms(secret: string): Buffer[] {
  const out = [Buffer.from(secret)];
  if (secret.startsWith('ipr_')) out.push(Buffer.from(secret.slice(8)), Buffer.from(secret.slice(4), 'base64url'));
  return out;
}

function ipr(dataDir: string, input: string | null, ...args: string[]) {
  const r = spawnSync(process.execPath, [cli, ...args, '--data', dataDir], { encoding: 'utf8', input: input ?? undefined });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

t.test('keys, passwords and session ids are stored only as digests; passwords as salted scrypt', async (t) => {
  const server = await startServer(t, { args: ['--signup'] });
  const store = accountStore(t, server.dataDir);
  const passwords = ['first password of ann', 'second password, bob'];
  t.equal(ipr(server.dataDir, passwords[0]!, 'accounts', 'create', '--email', 'ann@example.com', '--plan', 'pro').code, 0);
  const signUp = await dash(server.port, 'POST', 'sign-up', null, { email: 'bob@example.com', password: passwords[1] });
  t.equal(signUp.status, 202); // a sign-up signs nobody in since finding 10 of issue 13: the page signs in next
  await store.createAccount('cid@example.com', passwords[1]!, 'pro'); // the same password as bob's
  const cliKey = ipr(server.dataDir, null, 'keys', 'create', '--account', 'ann@example.com', '--name', 'from the CLI').stdout.trim().split('\n').at(-1)!;
  const session = await signIn(server.port, 'ann@example.com', passwords[0]);
  const dashKey = (await dash(server.port, 'POST', 'keys', session, { name: 'from the dashboard' })).json.key as string;
  const bobSession = (await signIn(server.port, 'bob@example.com', passwords[1])).id;
  for (const key of [cliKey, dashKey]) t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200);
  await new Promise((resolve) => setTimeout(resolve, 1300)); // last used and counts written

  const bytes = storeBytes(server.dataDir);
  for (const [what, secret] of [
    ['the CLI key', cliKey],
    ['the dashboard key', dashKey],
    ["ann's password", passwords[0]!],
    ["bob's password", passwords[1]!],
    ["ann's session id", session.id],
    ["bob's session id", bobSession],
  ] as const) {
    t.notOk(forms(secret).some((f) => bytes.includes(f)), `${what} is nowhere in the store's files`);
  }
  for (const secret of [cliKey, dashKey, session.id, bobSession]) t.ok(bytes.includes(Buffer.from(keyDigest(secret))), 'its SHA-256 is');
  const hashes = ['ann@example.com', 'bob@example.com', 'cid@example.com'].map((e) => store.account(e)!.passwordHash);
  for (const hash of hashes) t.match(hash, /^scrypt\$16384\$8\$1\$[A-Za-z0-9+/]{22}==\$[A-Za-z0-9+/]{43}=$/, 'scrypt N=2^14, r=8, p=1, a 16-byte salt');
  t.not(hashes[1], hashes[2], 'one password, two salts, two hashes');
});

t.test('comparisons of secrets: by digest lookup or crypto.timingSafeEqual, never ===', async (t) => {
  // Keys and session ids are found by their SHA-256 in the store: what a
  // lookup's time could tell is about a digest, which says nothing of the
  // key. Passwords go through scrypt and timingSafeEqual, with a dummy hash
  // for unknown accounts; CSRF tokens through timingSafeEqual after a length
  // check (their length is public). Any === on a secret would undo that.
  const sources = ['src/store/accounts.ts', 'src/server/api.ts', 'src/http/exchange.ts', 'src/dashboard/sessions.ts', 'src/dashboard/routes.ts', 'src/dashboard/views.ts'];
  for (const file of sources) {
    const text = readFileSync(path.join(root, file), 'utf8');
    const compares = text
      .split('\n')
      .map((line) => line.replace(/typeof [\w.]+ [!=]== '\w+'/g, '')) // a type check compares no secret
      .filter((line) => /(csrf|password|secret|token|\bkey\b)[\w.!?\]]*\s*[!=]==|[!=]==\s*[\w.]*(csrf|password|secret|token)/i.test(line));
    t.same(compares, [], `${file}: no secret compared with === or !==`);
  }
  const session = { account: 'a@example.com', csrf: randomBytes(32).toString('base64url'), created: 0, seen: 0 };
  t.ok(Sessions.csrfMatches(session, session.csrf));
  t.notOk(Sessions.csrfMatches(session, `${session.csrf.slice(0, -1)}${session.csrf.endsWith('A') ? 'B' : 'A'}`), 'the last character differs');
  t.notOk(Sessions.csrfMatches(session, session.csrf.slice(0, -1)), 'one character short');
  t.notOk(Sessions.csrfMatches(session, ''), 'none');
  t.equal(keyDigest('ipr_x'), createHash('sha256').update('ipr_x').digest('hex'), 'keys are found by their SHA-256');
});

t.test('no key, password, session id or CSRF token in logs, URLs or error bodies over a whole session', async (t) => {
  const server = await startServer(t, { args: ['--signup'], env: { IPR_LOG_LEVEL: 'debug' } });
  const store = accountStore(t, server.dataDir);
  const secrets: string[] = [];
  /** Given to the session's own pages in the account answers, so searched in logs and URLs only. */
  const csrfTokens: string[] = [];
  const replies: Reply[] = [];
  const urls: string[] = [];
  const keep = (r: Reply) => (replies.push(r), r);
  const call = (method: string, p: string, s: Signed | null, body?: unknown, headers: Record<string, string> = {}) => {
    urls.push(p);
    return dash(server.port, method, p, s, body, headers).then(keep);
  };
  const api = (key: string | null, body: unknown, headers: Record<string, string> = {}) => check(server.port, key, body, { headers }).then(keep);

  const password = 'correct horse battery staple';
  secrets.push(password);
  const cli = ipr(server.dataDir, 'another long password', 'accounts', 'create', '--email', 'ops@example.com', '--plan', 'pro');
  secrets.push('another long password');
  const cliKey = ipr(server.dataDir, null, 'keys', 'create', '--account', 'ops@example.com', '--name', 'cli').stdout.trim().split('\n').at(-1)!;
  secrets.push(cliKey);
  const listed = ipr(server.dataDir, null, 'keys', 'list', '--account', 'ops@example.com');
  t.notOk(listed.stdout.includes(cliKey.slice(8)), 'keys list never shows a key');

  t.equal((await call('POST', 'sign-up', null, { email: 'eve@example.com', password })).status, 202);
  // Mistakes people make: the password in the email field, a wrong password.
  await call('POST', 'session', null, { email: password, password: 'x' });
  await call('POST', 'session', null, { email: 'eve@example.com', password: `${password}!` });
  const s = await signIn(server.port, 'eve@example.com', password);
  secrets.push(s.id);
  csrfTokens.push(s.csrf);
  const created: string[] = [];
  for (const name of ['production', 'staging']) {
    const r = await dash(server.port, 'POST', 'keys', s, { name }); // the one answer that holds a key
    created.push(r.json.key);
  }
  secrets.push(...created);
  const [production, staging] = created as [string, string];
  for (const key of [production, staging, cliKey]) {
    await api(key, { ip: '8.8.8.8' });
    await api(key, { ip: 'not an address' });
    await api(key, '{"ip":');
    await api(key, { ip: '8.8.8.8' }, { 'content-type': 'text/plain' });
    await api(key, { ip: '8.8.8.8', pad: 'x'.repeat(9000) });
    await api(`${key}x`, { ip: '8.8.8.8' });
    await api(key.slice(0, -1), { ip: '8.8.8.8' });
    keep(await request(server.port, '/v1/check/batch', { headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: '{"ips":["8.8.8.8","x"]}' }));
  }
  await api(null, { ip: '8.8.8.8' }, { authorization: `Basic ${production}` });
  await call('GET', 'keys', s);
  await call('GET', 'usage', s);
  await call('GET', 'account', s);
  await call('PUT', `keys/${staging.slice(0, 8)}/allowed`, s, { allowed: ['192.0.2.0/24'] });
  await api(staging, { ip: '8.8.8.8' }); // 403 from here
  await call('DELETE', `keys/${staging.slice(0, 8)}`, s, undefined, { 'x-csrf-token': 'wrong' });
  await call('DELETE', `keys/${staging.slice(0, 8)}`, s);
  await api(staging, { ip: '8.8.8.8' }); // revoked: 401
  await call('POST', 'keys', s, { name: 'x' }, { origin: 'https://evil.example' });
  await call('DELETE', 'session', s);
  await call('GET', 'keys', s); // signed out
  const again = await signIn(server.port, 'eve@example.com', password);
  secrets.push(again.id);
  csrfTokens.push(again.csrf);
  t.equal(ipr(server.dataDir, null, 'keys', 'revoke', '--account', 'ops@example.com', '--prefix', cliKey.slice(0, 8)).code, 0);
  await api(cliKey, { ip: '8.8.8.8' });
  await new Promise((resolve) => setTimeout(resolve, 1300));

  // The pages build their request paths from literals and key prefixes only; one function calls fetch.
  for (const file of readdirSync(path.join(root, 'dashboard', 'assets')).filter((f) => f.endsWith('.js'))) {
    const text = readFileSync(path.join(root, 'dashboard', 'assets', file), 'utf8');
    for (const [, target] of text.matchAll(/\bapi\('[A-Z]+',\s*(`[^`]*`|'[^']*'|[\w.]+)/g)) {
      const parts = [...target!.matchAll(/\$\{([^}]*)\}/g)].map((m) => m[1]!);
      const literal = target!.startsWith("'") || (target!.startsWith('`') && parts.every((p) => /\.prefix\)?$/.test(p)));
      // sign-in.js posts to its form's data-endpoint: "session" or "sign-up" in the pages.
      t.ok(literal || target === 'form.dataset.endpoint', `${file}: api(..., ${target}) puts nothing but a prefix in the URL`);
    }
    t.equal((text.match(/\bfetch\(/g) ?? []).length, file === 'app.js' ? 1 : 0, `${file}: fetch only in api()`);
  }
  for (const page of ['sign-in.html', 'sign-up.html']) {
    t.match(readFileSync(path.join(root, 'dashboard', page), 'utf8'), /data-endpoint="(session|sign-up)"/, `${page}: a literal endpoint`);
  }

  const logs = server.output() + cli.stdout + cli.stderr + listed.stderr;
  t.ok(logs.includes('"event":"key_created"') && logs.includes('"event":"sign_in_failed"'), 'the session was logged');
  for (const token of csrfTokens) t.notOk(logs.includes(token) || urls.some((u) => u.includes(token)), 'a CSRF token is in no log and no URL');
  for (const secret of secrets) {
    const found = forms(secret).filter((f) => Buffer.from(logs).includes(f));
    t.same(found.length, 0, `not in the logs: ${secret.slice(0, 6)}...`);
    t.notOk(urls.some((u) => u.includes(secret) || u.includes(secret.slice(8))), 'not in a URL');
    const inBodies = replies.filter((r) => r.text.includes(secret) || (secret.startsWith('ipr_') && r.text.includes(secret.slice(8))));
    t.same(inBodies.map((r) => r.text.slice(0, 100)), [], 'not in an answer');
    const inHeaders = replies.filter((r) => Object.entries(r.headers).some(([name, v]) => name !== 'set-cookie' && String(v).includes(secret)));
    t.same(inHeaders.length, 0, 'not in a header (the session cookie aside)');
  }
  t.comment(`${replies.length} answers, ${urls.length} URLs and ${logs.split('\n').length} log lines searched for ${secrets.length + csrfTokens.length} secrets`);
});

t.test('sessions: a planted id is never adopted; a CSRF token works only with its own session', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  await store.createAccount('bob@example.com', PASSWORD, 'pro');
  // An attacker who sets a cookie in the victim's browser before sign-in (session fixation).
  const planted = randomBytes(32).toString('base64url');
  const victim = await signIn(server.port, 'ann@example.com', PASSWORD, { cookie: `ipr_session=${planted}` });
  t.not(victim.id, planted, 'the sign-in issues its own id');
  t.equal((await dash(server.port, 'GET', 'account', { id: planted, csrf: '' })).status, 401, 'the planted id is not signed in');
  t.equal(store.session(planted), undefined);
  // A CSRF token is bound to the session that received it.
  const bob = await signIn(server.port, 'bob@example.com');
  const crossed = await dash(server.port, 'POST', 'keys', victim, { name: 'x' }, { 'x-csrf-token': bob.csrf });
  t.same([crossed.status, crossed.json.error], [403, 'csrf_failed']);
  t.same(store.listKeys('ann@example.com'), [], 'nothing made');
});

t.test('framing and sniffing refused on every kind of dashboard answer (HEAD, 405, 413, 415 included); names stay data', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const s = await signIn(server.port, 'ann@example.com');
  const names = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "'; alert(1); //", '</title><svg onload=alert(1)>'];
  for (const name of names) t.equal((await dash(server.port, 'POST', 'keys', s, { name })).status, 201);
  const answers: [string, Reply | { status: number; headers: Record<string, string> }][] = [
    ['keys list', await dash(server.port, 'GET', 'keys', s)],
    ['usage', await dash(server.port, 'GET', 'usage', s)],
    ['415', await request(server.port, '/dashboard/api/keys', { headers: { cookie: `ipr_session=${s.id}`, 'x-csrf-token': s.csrf, 'content-type': 'text/plain' }, body: 'x' })],
    ['413', await request(server.port, '/dashboard/api/keys', { headers: { cookie: `ipr_session=${s.id}`, 'x-csrf-token': s.csrf, 'content-type': 'application/json' }, body: 'x'.repeat(9000) })],
    ['405', await dash(server.port, 'PATCH', 'session', s)],
    ['HEAD page', (await exchange(server.port, `HEAD /dashboard/keys HTTP/1.1\r\nHost: x\r\nCookie: ipr_session=${s.id}\r\n\r\n`, 1, { head: [true] })).answers[0]!],
    ['HEAD api', (await exchange(server.port, `HEAD /dashboard/api/keys HTTP/1.1\r\nHost: x\r\nCookie: ipr_session=${s.id}\r\n\r\n`, 1, { head: [true] })).answers[0]!],
  ];
  for (const [what, r] of answers) {
    t.equal(r.headers['x-frame-options'], 'DENY', `${what} (${r.status}): X-Frame-Options`);
    t.match(r.headers['content-security-policy'], /default-src 'none'.*frame-ancestors 'none'/, `${what}: CSP`);
    t.equal(r.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
  }
  const list = answers[0]![1] as Reply;
  t.equal(list.headers['content-type'], 'application/json; charset=utf-8', 'names reach the page as JSON data');
  t.same(list.json.keys.map((k: { name: string }) => k.name).sort(), [...names].sort(), 'byte for byte');
  const page = await request(server.port, '/dashboard/keys', { method: 'GET', headers: { cookie: `ipr_session=${s.id}` } });
  t.notOk(names.some((n) => page.text.includes(n)), 'no name is written into a page by the server');
});

t.test("one customer cannot reach another's keys, usage or limits", async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'free'); // 100 a day, 1 a second
  await store.createAccount('bob@example.com', PASSWORD, 'free');
  const annKey = store.createKey('ann@example.com', 'ann').key;
  const bobKey = store.createKey('bob@example.com', 'bob').key;
  const ann = await signIn(server.port, 'ann@example.com');
  // Ann's requests use her windows only.
  t.equal((await check(server.port, annKey, { ip: '8.8.8.8' })).status, 200);
  t.equal((await check(server.port, annKey, { ip: '8.8.8.8' })).status, 429, 'ann over her second');
  const bob = await check(server.port, bobKey, { ip: '8.8.8.8' });
  t.same([bob.status, bob.headers['x-ratelimit-remaining']], [200, '99'], "bob's window is his own");
  // Ann's session and bob's prefix, in every form a path can carry it.
  const prefix = bobKey.slice(0, 8);
  for (const p of [prefix, prefix.toUpperCase(), `${prefix}%00`, `%2e%2e%2f${prefix}`, encodeURIComponent(bobKey)]) {
    const r = await dash(server.port, 'DELETE', `keys/${p}`, ann);
    t.equal(r.status, 404, `DELETE keys/${p.slice(0, 20)}: 404`);
  }
  t.equal((await check(server.port, bobKey, { ip: '8.8.8.8' }).then(() => check(server.port, bobKey, { ip: '8.8.8.8' }))).status, 429, "bob's key still works (and is limited as his)");
  await new Promise((resolve) => setTimeout(resolve, 1100));
  t.equal((await check(server.port, bobKey, { ip: '8.8.8.8' })).status, 200);
  const usage = await dash(server.port, 'GET', 'usage', ann);
  t.same(usage.json.keys.map((k: { prefix: string }) => k.prefix), [annKey.slice(0, 8)], "ann's usage lists her key only");
  t.equal(usage.json.total.at(-1), 1, 'and counts her request only');
  t.notOk((await dash(server.port, 'GET', 'keys', ann)).text.includes(prefix));
});
