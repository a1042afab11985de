// The dashboard over HTTP against a real server: sessions (cookie, rotation,
// sign-out, idle and absolute expiry on the test clock), CSRF and cross-site
// refusal, the sign-in limits per account and per address, one customer
// never reaching another's keys, keys and usage, sign-up, the security
// headers and static files.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { keyDigest } from '../src/store/accounts.js';
import { accountStore, check, cookieOf, dash, dataDirWithFullSnapshot, PASSWORD, request, setClock, signIn, startServer, type Reply, type Signed } from './server.js';

const NOON = Date.parse('2026-03-01T12:00:00.000Z');
const MINUTE = 60_000;

t.test('sign in and out: cookie, session rotation, pages need a session, only a digest stored', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');

  const page = await request(server.port, '/dashboard/keys', { method: 'GET' });
  t.equal(page.status, 303, 'a page without a session');
  t.equal(page.headers.location, '/dashboard/sign-in');
  t.equal((await request(server.port, '/dashboard', { method: 'GET' })).headers.location, '/dashboard/keys');
  t.same((await dash(server.port, 'GET', 'keys')).json, { error: 'signed_out', message: 'Sign in first', details: {} });

  const first = await dash(server.port, 'POST', 'session', null, { email: 'Ann@Example.com', password: PASSWORD });
  t.equal(first.status, 200);
  t.match(cookieOf(first), /^ipr_session=[A-Za-z0-9_-]{43}; Path=\/dashboard; HttpOnly; SameSite=Strict; Max-Age=43200$/, 'HttpOnly, SameSite=Strict, not Secure over plain HTTP');
  t.same(Object.keys(first.json), ['email', 'created', 'plan', 'csrf_token']);
  t.match(first.json, { email: 'ann@example.com', plan: { name: 'pro', requests_per_day: 100_000, requests_per_second: 50 }, csrf_token: /^[A-Za-z0-9_-]{43}$/ });
  const one: Signed = { id: /ipr_session=([^;]+)/.exec(cookieOf(first))![1]!, csrf: first.json.csrf_token };

  const signedInPage = await request(server.port, '/dashboard/keys', { method: 'GET', headers: { cookie: `other=1; ipr_session=${one.id}` } });
  t.equal(signedInPage.status, 200);
  t.equal(signedInPage.headers['content-type'], 'text/html; charset=utf-8');
  t.match(signedInPage.text, /<h1>API Keys<\/h1>/);
  t.equal((await request(server.port, '/dashboard/sign-in', { method: 'GET', headers: { cookie: `ipr_session=${one.id}` } })).headers.location, '/dashboard/keys', 'signed in: the sign-in page moves on');

  // Only the SHA-256 of a session id is stored.
  t.ok(store.session(one.id), 'the session is in the store');
  const file = readFileSync(path.join(server.dataDir, 'accounts', 'data.mdb'));
  t.notOk(file.includes(one.id), 'the id itself is nowhere in the file');
  t.ok(file.includes(Buffer.from(keyDigest(one.id))), 'its digest is');

  // Signing in again (with the old cookie) gives a new id and ends the old one.
  const two = await signIn(server.port, 'ann@example.com', PASSWORD, { cookie: `ipr_session=${one.id}` });
  t.not(two.id, one.id);
  t.not(two.csrf, one.csrf, 'a new CSRF token too');
  const old = await dash(server.port, 'GET', 'account', one);
  t.equal(old.status, 401, 'the id from before the sign-in is dead');
  t.match(cookieOf(old), /^ipr_session=; .*Max-Age=0$/, 'and its cookie is cleared');
  t.equal((await dash(server.port, 'GET', 'account', two)).json.email, 'ann@example.com');

  // Sign-out needs the CSRF token, then ends the session everywhere.
  t.equal((await dash(server.port, 'DELETE', 'session', two, undefined, { 'x-csrf-token': '' })).status, 403);
  const out = await dash(server.port, 'DELETE', 'session', two);
  t.equal(out.status, 200);
  t.match(cookieOf(out), /^ipr_session=; Path=\/dashboard; HttpOnly; SameSite=Strict; Max-Age=0$/);
  t.equal((await dash(server.port, 'GET', 'keys', two)).status, 401, 'signed out');
  t.equal((await request(server.port, '/dashboard/usage', { method: 'GET', headers: { cookie: `ipr_session=${two.id}` } })).headers.location, '/dashboard/sign-in');
  t.equal(store.session(two.id), undefined, 'gone from the store');

  // A suspended account's session ends too.
  const three = await signIn(server.port, 'ann@example.com');
  store.setStatus('ann@example.com', 'suspended');
  t.equal((await dash(server.port, 'GET', 'keys', three)).status, 401);
  const refused = await dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD });
  t.same([refused.status, refused.json.error], [403, 'account_suspended']);
});

t.test('CSRF token and cross-site requests: every change is refused without them', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const s = await signIn(server.port, 'ann@example.com');
  const { key } = store.createKey('ann@example.com', 'existing');
  const prefix = key.slice(0, 8);
  const csrfFailed = { error: 'csrf_failed', message: 'The request lacks the CSRF token of this session', details: {} };
  const crossSite = { error: 'cross_site', message: 'Cross-site requests are refused', details: {} };

  for (const [method, p, body] of [
    ['POST', 'keys', { name: 'x' }],
    ['DELETE', `keys/${prefix}`, undefined],
    ['PUT', `keys/${prefix}/allowed`, { allowed: ['192.0.2.1'] }],
    ['DELETE', 'session', undefined],
  ] as const) {
    const without = await dash(server.port, method, p, s, body, { 'x-csrf-token': '' });
    t.same([without.status, without.json], [403, csrfFailed], `${method} ${p} without the token`);
    const wrong = await dash(server.port, method, p, s, body, { 'x-csrf-token': s.csrf.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')) });
    t.same([wrong.status, wrong.json], [403, csrfFailed], `${method} ${p} with another token`);
    const evil = await dash(server.port, method, p, s, body, { origin: 'https://evil.example' });
    t.same([evil.status, evil.json], [403, crossSite], `${method} ${p} from another origin, even with the token`);
    const fetchSite = await dash(server.port, method, p, s, body, { 'sec-fetch-site': 'cross-site' });
    t.same([fetchSite.status, fetchSite.json], [403, crossSite], `${method} ${p} marked cross-site by the browser`);
    const nullOrigin = await dash(server.port, method, p, s, body, { origin: 'null' });
    t.same(nullOrigin.status, 403, `${method} ${p} from an opaque origin`);
  }
  t.equal(store.listKeys('ann@example.com').length, 1, 'nothing was created');
  t.equal(store.listKeys('ann@example.com')[0]!.revoked, null, 'nothing was revoked');
  t.same(store.listKeys('ann@example.com')[0]!.allowed, [], 'nothing was changed');
  t.equal((await dash(server.port, 'GET', 'account', s)).status, 200, 'still signed in');

  // What an HTML form could send cross-site is not JSON: refused before anything.
  const form = await request(server.port, '/dashboard/api/keys', {
    method: 'POST',
    headers: { cookie: `ipr_session=${s.id}`, 'x-csrf-token': s.csrf, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'name=x',
  });
  t.equal(form.status, 415);
  // A sign-in from another site is refused too (login CSRF).
  const login = await dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD }, { origin: 'https://evil.example' });
  t.same([login.status, login.json.error, login.headers['set-cookie']], [403, 'cross_site', undefined]);

  // Same origin, with the token: accepted.
  const ok = await dash(server.port, 'POST', 'keys', s, { name: 'made here' }, { origin: `http://127.0.0.1:${server.port}`, 'sec-fetch-site': 'same-origin' });
  t.equal(ok.status, 201);
});

t.test('session expiry: 30 minutes idle, 12 hours at most', async (t) => {
  const server = await startServer(t, { clock: NOON });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');

  const idle = await signIn(server.port, 'ann@example.com');
  await setClock(t, NOON + 29 * MINUTE);
  t.equal((await dash(server.port, 'GET', 'keys', idle)).status, 200, '29 minutes idle: alive, and now seen again');
  await setClock(t, NOON + 58 * MINUTE);
  t.equal((await dash(server.port, 'GET', 'keys', idle)).status, 200, '29 more minutes: alive');
  await setClock(t, NOON + 88 * MINUTE);
  const expired = await dash(server.port, 'GET', 'keys', idle);
  t.same([expired.status, expired.json.error], [401, 'signed_out'], '30 minutes without a request: ended');
  t.equal((await request(server.port, '/dashboard/keys', { method: 'GET', headers: { cookie: `ipr_session=${idle.id}` } })).headers.location, '/dashboard/sign-in');

  // Busy all the time, a session still ends 12 hours after sign-in.
  const start = NOON + 2 * 60 * MINUTE;
  await setClock(t, start);
  const busy = await signIn(server.port, 'ann@example.com');
  let at = start;
  while (at + 25 * MINUTE < start + 12 * 60 * MINUTE) {
    at += 25 * MINUTE;
    await setClock(t, at);
    if ((await dash(server.port, 'GET', 'account', busy)).status !== 200) break;
  }
  t.equal(at, start + 11 * 60 * MINUTE + 40 * MINUTE, 'alive through 11 h 40 min of activity');
  await setClock(t, start + 12 * 60 * MINUTE);
  t.equal((await dash(server.port, 'GET', 'account', busy)).status, 401, 'ended at 12 h');

  // Ended sessions are removed from the store (at start, then every 15 minutes).
  const alive = await signIn(server.port, 'ann@example.com');
  t.ok(store.session(idle.id) && store.session(busy.id), 'ended sessions are still stored');
  await server.stop();
  const restarted = await startServer(t, { dataDir: server.dataDir, clock: start + 12 * 60 * MINUTE + MINUTE });
  for (let i = 0; i < 50 && store.session(busy.id); i++) await new Promise((resolve) => setTimeout(resolve, 100));
  t.same([store.session(idle.id), store.session(busy.id)], [undefined, undefined], 'removed after a restart');
  t.equal((await dash(restarted.port, 'GET', 'account', alive)).status, 200, 'a live session survives the restart');
});

t.test('sign-in limits: 5 attempts per account and 30 per address in 15 minutes, shared by the workers', async (t) => {
  const server = await startServer(t, { clock: NOON, workers: 2 });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  await store.createAccount('bob@example.com', PASSWORD, 'pro');

  const wrong = () => dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password: 'not the password' });
  for (let i = 0; i < 5; i++) {
    const r = await wrong();
    t.same([r.status, r.json], [401, { error: 'sign_in_failed', message: 'Wrong email or password', details: {} }], `wrong password ${i + 1}`);
  }
  const limited = await dash(server.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD });
  t.equal(limited.status, 429, 'the right password, after 5 failures');
  t.same(limited.json, { error: 'sign_in_limited', message: 'Too many sign-in attempts. Try again in 15 minutes.', details: { retry_after: 900 } });
  t.equal(limited.headers['retry-after'], '900');
  t.equal(limited.headers['set-cookie'], undefined);
  t.ok(await signIn(server.port, 'bob@example.com'), 'another account from the same address is not locked');

  await setClock(t, NOON + 10 * MINUTE);
  t.match((await wrong()).json, { error: 'sign_in_limited', message: 'Too many sign-in attempts. Try again in 5 minutes.', details: { retry_after: 300 } });
  await setClock(t, NOON + 15 * MINUTE);
  t.ok(await signIn(server.port, 'ann@example.com'), 'the window has ended');
  for (let i = 0; i < 4; i++) await wrong();
  t.ok(await signIn(server.port, 'ann@example.com'), 'a success clears the count');
  for (let i = 0; i < 4; i++) t.equal((await wrong()).status, 401, 'four more failures allowed after it');

  // Attempts are counted before the password is checked: parallel guesses cannot slip through.
  await store.createAccount('cat@example.com', PASSWORD, 'pro');
  const burst = await Promise.all(Array.from({ length: 12 }, () => dash(server.port, 'POST', 'session', null, { email: 'cat@example.com', password: 'guess guess guess' })));
  t.same(
    burst.map((r) => r.status).sort(),
    [...new Array(5).fill(401), ...new Array(7).fill(429)],
    '12 parallel guesses over two workers: exactly 5 checked',
  );

  // Per address: failures over many accounts (the 5 of bob's... and unknown ones) reach 30.
  await setClock(t, NOON + 31 * MINUTE);
  await store.createAccount('dan@example.com', PASSWORD, 'pro');
  for (let i = 0; i < 30; i++) {
    const r = await dash(server.port, 'POST', 'session', null, { email: `nobody${i}@example.com`, password: 'not the password' });
    t.equal(r.status, 401, `unknown account ${i}: the same answer as a wrong password`);
  }
  const address = await dash(server.port, 'POST', 'session', null, { email: 'dan@example.com', password: PASSWORD });
  t.same([address.status, address.json.error], [429, 'sign_in_limited'], 'the address has used its 30 attempts');
});

t.test('one customer can never see, revoke or change another customer\'s keys', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  await store.createAccount('bob@example.com', PASSWORD, 'starter');
  const bobKey = store.createKey('bob@example.com', "bob's production").key;
  const bobPrefix = bobKey.slice(0, 8);
  const ann = await signIn(server.port, 'ann@example.com');
  const annKey = (await dash(server.port, 'POST', 'keys', ann, { name: "ann's key" })).json.key as string;
  t.equal((await check(server.port, bobKey, { ip: '8.8.8.8' })).status, 200);

  const keys = await dash(server.port, 'GET', 'keys', ann);
  t.same(keys.json.keys.map((k: { prefix: string }) => k.prefix), [annKey.slice(0, 8)], "only ann's own key");
  t.notOk(keys.text.includes(bobPrefix));
  const usage = await dash(server.port, 'GET', 'usage', ann);
  t.notOk(usage.text.includes(bobPrefix), "bob's key is not in ann's usage");
  t.equal(usage.json.total.at(-1), 0, "nor are bob's requests");

  const revoke = await dash(server.port, 'DELETE', `keys/${bobPrefix}`, ann);
  t.same([revoke.status, revoke.json.error], [404, 'key_missing'], "revoking bob's key: as if it did not exist");
  const allow = await dash(server.port, 'PUT', `keys/${bobPrefix}/allowed`, ann, { allowed: ['192.0.2.1'] });
  t.same([allow.status, allow.json.error], [404, 'key_missing']);
  t.same([revoke.json.message, allow.json.message], [`no key ${bobPrefix} in account ann@example.com`, `no key ${bobPrefix} in account ann@example.com`]);
  t.equal((await check(server.port, bobKey, { ip: '8.8.8.8' })).status, 200, "bob's key still works");
  t.same(store.listKeys('bob@example.com')[0]!.allowed, [], 'and is unchanged');
  t.equal((await dash(server.port, 'DELETE', 'keys/ipr_nope', ann)).status, 404, 'an unknown prefix');

  // Ann's own key: revoked at once.
  t.equal((await check(server.port, annKey, { ip: '8.8.8.8' })).status, 200);
  const own = await dash(server.port, 'DELETE', `keys/${annKey.slice(0, 8)}`, ann);
  t.same([own.status, own.json.prefix], [200, annKey.slice(0, 8)]);
  t.equal((await check(server.port, annKey, { ip: '8.8.8.8' })).status, 401, 'the next call with it');
  t.same((await dash(server.port, 'GET', 'keys', ann)).json.keys, [], 'no longer listed');
});

t.test('keys: created once, validated, allowed addresses, names as data; live requests today and last used', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'starter');
  const s = await signIn(server.port, 'ann@example.com');

  const created = await dash(server.port, 'POST', 'keys', s, { name: '<script>alert(1)</script>' });
  t.equal(created.status, 201);
  t.equal(created.headers['content-type'], 'application/json; charset=utf-8');
  t.equal(created.headers['x-content-type-options'], 'nosniff');
  t.equal(created.headers['cache-control'], 'no-store', 'the key is never cached');
  t.same(Object.keys(created.json), ['key', 'name', 'prefix', 'created', 'last_used', 'requests_today', 'allowed']);
  const key = created.json.key as string;
  t.match(key, /^ipr_[A-Za-z0-9_-]{43}$/);
  t.match(created.json, { name: '<script>alert(1)</script>', prefix: key.slice(0, 8), last_used: null, requests_today: 0, allowed: [] });
  const list = await dash(server.port, 'GET', 'keys', s);
  t.notOk(list.text.includes(key), 'the key is never shown again');
  t.same(list.json.plan, { name: 'starter', requests_per_day: 10_000, requests_per_second: 10 });
  t.equal(list.json.keys[0].name, '<script>alert(1)</script>', 'the name is data, sent as JSON');

  for (let i = 0; i < 3; i++) t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200);
  const after = (await dash(server.port, 'GET', 'keys', s)).json.keys[0];
  t.equal(after.requests_today, 3, "today's requests at once, from the live counters");
  t.ok(Date.now() - Date.parse(after.last_used) < 10_000, 'last used: just now');

  for (const [body, message] of [
    [{}, 'a key needs a name'],
    [{ name: '   ' }, 'a key needs a name of 1 to 100 characters'],
    [{ name: 'x'.repeat(101) }, 'a key needs a name of 1 to 100 characters'],
    [{ name: 'x', allowed: '10.0.0.0/8' }, 'allowed must be a list of addresses or CIDR prefixes'],
    [{ name: 'x', allowed: ['10.0.0.0/33'] }, 'not an address or CIDR prefix: "10.0.0.0/33"'],
  ] as const) {
    const r = await dash(server.port, 'POST', 'keys', s, body);
    t.same([r.status, r.json], [400, { error: 'invalid_request', message, details: {} }], JSON.stringify(body));
  }
  t.same((await dash(server.port, 'POST', 'keys', s, undefined, { 'content-type': 'application/json' })).json.error, 'invalid_json');
  const big = await request(server.port, '/dashboard/api/keys', {
    headers: { cookie: `ipr_session=${s.id}`, 'x-csrf-token': s.csrf, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'x'.repeat(9000) }),
  });
  t.equal(big.status, 413);
  t.equal((await dash(server.port, 'GET', 'keys', s)).json.keys.length, 1, 'no key made by a refused request');

  // Allowed source addresses: the test connects from 127.0.0.1.
  const prefix = key.slice(0, 8);
  const elsewhere = await dash(server.port, 'PUT', `keys/${prefix}/allowed`, s, { allowed: ['203.0.113.0/24', '2001:DB8::/32'] });
  t.same([elsewhere.status, elsewhere.json.allowed], [200, ['203.0.113.0/24', '2001:db8::/32']]);
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 403, 'a call from elsewhere');
  await dash(server.port, 'PUT', `keys/${prefix}/allowed`, s, { allowed: [] });
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200, 'from anywhere again');
  const withAllowed = await dash(server.port, 'POST', 'keys', s, { name: 'office', allowed: ['127.0.0.1'] });
  t.same(withAllowed.json.allowed, ['127.0.0.1']);
  t.equal((await check(server.port, withAllowed.json.key, { ip: '8.8.8.8' })).status, 200);
});

t.test('usage: 30 UTC days per key and in total, days before from the store, today live', async (t) => {
  const server = await startServer(t, { clock: '2026-03-01T23:59:00.000Z' });
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const s = await signIn(server.port, 'ann@example.com');
  const one = (await dash(server.port, 'POST', 'keys', s, { name: 'one' })).json.key as string;
  const two = (await dash(server.port, 'POST', 'keys', s, { name: 'two' })).json.key as string;
  for (let i = 0; i < 4; i++) await check(server.port, one, { ip: '8.8.8.8' });
  await setClock(t, '2026-03-02T00:00:30.000Z');
  for (let i = 0; i < 2; i++) await check(server.port, one, { ip: '8.8.8.8' });
  for (let i = 0; i < 3; i++) await check(server.port, two, { ip: '8.8.8.8' });
  await new Promise((resolve) => setTimeout(resolve, 1300)); // the main thread writes the day before once a second
  await dash(server.port, 'DELETE', `keys/${two.slice(0, 8)}`, s);

  const usage = (await dash(server.port, 'GET', 'usage', s)).json;
  t.equal(usage.days.length, 30);
  t.same([usage.days[0], usage.days[28], usage.days[29]], ['2026-02-01', '2026-03-01', '2026-03-02']);
  t.same(usage.keys.map((k: { name: string; revoked: string | null }) => [k.name, k.revoked !== null]), [['one', false], ['two', true]], 'a deleted key with requests in the period stays');
  t.same(usage.keys[0].requests.slice(27), [0, 4, 2]);
  t.same(usage.keys[1].requests.slice(27), [0, 0, 3]);
  t.same(usage.total.slice(27), [0, 4, 5]);
  t.equal(usage.total.slice(0, 27).reduce((a: number, b: number) => a + b, 0), 0);
  t.same(usage.plan, { name: 'pro', requests_per_day: 100_000, requests_per_second: 50 });
});

t.test('sign-up: off by default; with --signup, an account on the first plan', async (t) => {
  const closed = await startServer(t);
  const refused = await dash(closed.port, 'POST', 'sign-up', null, { email: 'new@example.com', password: PASSWORD });
  t.same([refused.status, refused.json.error], [404, 'signup_disabled']);
  t.equal((await request(closed.port, '/dashboard/sign-up', { method: 'GET' })).status, 404, 'no sign-up page');
  t.equal((await dash(closed.port, 'GET', 'about')).json.signup, false);

  const open = await startServer(t, { dataDir: dataDirWithFullSnapshot(t, 'open'), args: ['--signup'] });
  t.equal((await dash(open.port, 'GET', 'about')).json.signup, true);
  t.equal((await request(open.port, '/dashboard/sign-up', { method: 'GET' })).status, 200);
  // Finding 10 of issue 13: a sign-up no longer signs in (nor says whether the email had an account); the page signs in next.
  const made = await dash(open.port, 'POST', 'sign-up', null, { email: 'New@Example.com', password: PASSWORD });
  t.equal(made.status, 202);
  t.equal(made.headers['set-cookie'], undefined);
  const signedUp = await signIn(open.port, 'new@example.com');
  t.match((await dash(open.port, 'GET', 'account', signedUp)).json, { email: 'new@example.com', plan: { name: 'free', requests_per_day: 100, requests_per_second: 1 } }, 'an account on the first plan');

  const again = await dash(open.port, 'POST', 'sign-up', null, { email: 'new@example.com', password: PASSWORD });
  t.same([again.status, again.json], [made.status, made.json], 'an email with an account: the same answer');
  const short = await dash(open.port, 'POST', 'sign-up', null, { email: 'x@example.com', password: 'short' });
  t.same([short.status, short.json], [400, { error: 'invalid_request', message: 'a password needs 10 to 1024 characters', details: {} }]);
  const email = await dash(open.port, 'POST', 'sign-up', null, { email: 'not an email', password: PASSWORD });
  t.same([email.status, email.json.message], [400, 'that is not an email address']);
});

t.test('behind a proxy (--trust-proxy): Secure cookie over HTTPS, limits by the forwarded address; not trusted without it', async (t) => {
  const proxied = await startServer(t, { args: ['--trust-proxy'] });
  const store = accountStore(t, proxied.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const https = await dash(proxied.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD }, { 'x-forwarded-proto': 'https' });
  t.match(cookieOf(https), /; Secure; Max-Age=43200$/);
  t.equal(https.headers['strict-transport-security'], 'max-age=31536000');
  const http = await dash(proxied.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD }, { 'x-forwarded-proto': 'http' });
  t.notOk(cookieOf(http).includes('Secure'));
  // The Origin is checked against the host the client asked the proxy for.
  const s = await signIn(proxied.port, 'ann@example.com');
  const viaProxy = await dash(proxied.port, 'POST', 'keys', s, { name: 'x' }, { origin: 'https://dash.example.com', 'x-forwarded-host': 'dash.example.com' });
  t.equal(viaProxy.status, 201);

  const guess = (port: number, from: string, i: number) =>
    dash(port, 'POST', 'session', null, { email: `nobody${i}@example.com`, password: 'not the password' }, { 'x-forwarded-for': `192.0.2.77, ${from}` });
  for (let i = 0; i < 30; i++) await guess(proxied.port, '198.51.100.1', i);
  t.equal((await guess(proxied.port, '198.51.100.1', 99)).status, 429, 'the forwarded client has used its attempts');
  t.equal((await guess(proxied.port, '198.51.100.2', 99)).status, 401, 'another forwarded client has not');
  t.equal((await guess(proxied.port, '2001:db8:1:2::5', 1)).status, 401);

  const direct = await startServer(t, { dataDir: dataDirWithFullSnapshot(t, 'direct') });
  const directStore = accountStore(t, direct.dataDir);
  await directStore.createAccount('ann@example.com', PASSWORD, 'pro');
  const spoofed = await dash(direct.port, 'POST', 'session', null, { email: 'ann@example.com', password: PASSWORD }, { 'x-forwarded-proto': 'https' });
  t.notOk(cookieOf(spoofed).includes('Secure'), 'without --trust-proxy the header is ignored');
  t.equal(spoofed.headers['strict-transport-security'], undefined);
});

t.test('security headers on every dashboard answer; pages and files with their types and caching; the API untouched', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  await store.createAccount('ann@example.com', PASSWORD, 'pro');
  const s = await signIn(server.port, 'ann@example.com');
  const get = (p: string, headers: Record<string, string> = {}) => request(server.port, p, { method: 'GET', headers: { cookie: `ipr_session=${s.id}`, ...headers } });

  const answers: [string, Reply][] = [
    ['page', await get('/dashboard/keys')],
    ['sign-in page', await request(server.port, '/dashboard/sign-in', { method: 'GET' })],
    ['redirect', await request(server.port, '/dashboard/usage', { method: 'GET' })],
    ['stylesheet', await get('/dashboard/assets/dashboard.css')],
    ['script', await get('/dashboard/assets/keys.js')],
    ['image', await get('/dashboard/assets/logo.svg')],
    ['unknown page', await get('/dashboard/nope')],
    ['unknown file', await get('/dashboard/assets/nope.js')],
    ['api', await dash(server.port, 'GET', 'keys', s)],
    ['api signed out', await dash(server.port, 'GET', 'keys')],
    ['api unknown', await dash(server.port, 'GET', 'nope', s)],
    ['api wrong method', await dash(server.port, 'PATCH', 'keys', s)],
    ['api refused', await dash(server.port, 'POST', 'keys', s, { name: 'x' }, { 'x-csrf-token': '' })],
  ];
  for (const [what, r] of answers) {
    t.equal(
      r.headers['content-security-policy'],
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
      `${what}: CSP`,
    );
    t.equal(r.headers['x-frame-options'], 'DENY', `${what}: X-Frame-Options`);
    t.equal(r.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
    t.equal(r.headers['referrer-policy'], 'no-referrer', `${what}: Referrer-Policy`);
  }
  const [page, , , css, js, svg, unknownPage, unknownFile, , , unknownApi, wrongMethod] = answers.map(([, r]) => r);
  t.equal(page!.headers['cache-control'], 'no-store', 'pages: never from a cache after sign-out');
  t.same([css!.headers['content-type'], js!.headers['content-type'], svg!.headers['content-type']], ['text/css; charset=utf-8', 'text/javascript; charset=utf-8', 'image/svg+xml']);
  t.equal(js!.headers['cache-control'], 'no-cache');
  t.match(js!.headers.etag, /^"[A-Za-z0-9_-]{22}"$/);
  const revalidated = await get('/dashboard/assets/keys.js', { 'if-none-match': js!.headers.etag! });
  t.same([revalidated.status, revalidated.text], [304, ''], 'unchanged: 304');
  t.same([unknownPage!.status, unknownPage!.headers['content-type']], [404, 'text/html; charset=utf-8']);
  t.equal(unknownFile!.status, 404);
  t.same([unknownApi!.status, unknownApi!.json.error], [404, 'not_found']);
  t.same([wrongMethod!.status, wrongMethod!.headers.allow], [405, 'GET, HEAD, POST']);

  // No inline script or style in any page: the CSP would block them.
  for (const name of ['keys', 'usage', 'account', 'sign-in']) {
    const html = (await get(`/dashboard/${name}`)).text;
    t.notMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, `${name}: every script is a file`);
    t.notMatch(html, /\sstyle=|<style/i, `${name}: no inline style`);
  }

  // The API and its 404 are as they were.
  const notFound = await request(server.port, '/nope', { method: 'GET' });
  t.same([notFound.status, notFound.json.error, notFound.headers['content-security-policy']], [404, 'not_found', undefined]);
  t.equal((await request(server.port, '/v1/health', { method: 'GET' })).headers['content-security-policy'], undefined);
});
