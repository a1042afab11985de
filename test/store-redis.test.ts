/**
 * The Redis customer store on a real redis-server: store URLs, accounts,
 * keys found by digest from another connection (another node), revocation,
 * allowed addresses, customers apart, sessions with their TTL, sign-in
 * attempt windows on the Redis clock, and every key under the prefix.
 */
import t from 'tap';
import { IprError } from '../src/errors.js';
import { keyDigest } from '../src/store/accounts.js';
import { parseStoreUrl, redactStoreUrl } from '../src/store/redis-connection.js';
import { accountTag, RedisCustomerStore } from '../src/store/redis.js';
import { startRedis } from './redis.js';

t.test('store URLs', async (t) => {
  t.match(parseStoreUrl('redis://127.0.0.1:6380'), { tls: false, cluster: false, nodes: [{ host: '127.0.0.1', port: 6380 }], username: null, password: null, database: 0, prefix: 'ipr:' });
  t.match(parseStoreUrl('rediss://app:s%3Acret@cache.example:6390/3?prefix=prod:'), {
    tls: true,
    nodes: [{ host: 'cache.example', port: 6390 }],
    username: 'app',
    password: 's:cret',
    database: 3,
    prefix: 'prod:',
  });
  t.match(parseStoreUrl('redis://hunter2@[::1]'), { nodes: [{ host: '::1', port: 6379 }], username: null, password: 'hunter2' });
  t.match(parseStoreUrl('redis+cluster://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3'), {
    cluster: true,
    nodes: [
      { host: '10.0.0.1', port: 7000 },
      { host: '10.0.0.2', port: 7001 },
      { host: '10.0.0.3', port: 6379 },
    ],
  });
  const bad: [string, RegExp][] = [
    ['http://localhost:6379', /not a store URL/],
    ['redis://localhost:99999', /"99999" is not a port/],
    ['redis://localhost:port', /"port" is not a port/],
    ['redis://a:1,b:2', /several hosts need redis\+cluster/],
    ['redis+cluster://a:1/2', /only database 0/],
    ['redis://a:1/x', /"x" is not a database number/],
    ['redis://a:1?prefix={x}', /a prefix is 1 to 64/],
    ['redis://a:1?timeout=3', /unknown option "timeout"/],
    ['redis://user:topsecret@a:1/x', /"x" is not a database number/],
  ];
  for (const [url, message] of bad) {
    const error = t.throws(() => parseStoreUrl(url)) as IprError;
    t.equal(error.code, 'invalid_argument', url);
    t.match(error.message, message, url);
    t.notMatch(error.message, /topsecret/, 'never the password');
  }
  t.equal(redactStoreUrl('redis://user:topsecret@a:1'), 'redis://user:***@a:1');
  t.equal(redactStoreUrl('rediss://topsecret@a:1/2'), 'rediss://***@a:1/2');
  t.equal(redactStoreUrl('redis://a:1'), 'redis://a:1');
});

t.test('accounts and keys, seen from another node', async (t) => {
  const redis = await startRedis(t);
  const store = await RedisCustomerStore.open(`${redis.url}?prefix=test-a:`);
  const other = await RedisCustomerStore.open(`${redis.url}?prefix=test-a:`);
  t.teardown(async () => {
    await store.close();
    await other.close();
  });

  const account = await store.createAccount('Ann@Example.com', 'a long password', 'pro');
  t.match(account, { email: 'ann@example.com', plan: 'pro', status: 'active' });
  await t.rejects(other.createAccount('ann@example.com', 'another password', 'free'), { code: 'account_exists' });
  t.match(await other.verifyPassword('ANN@example.com', 'a long password'), { email: 'ann@example.com' });
  t.equal(await other.verifyPassword('ann@example.com', 'the wrong password'), undefined);
  t.equal(await other.verifyPassword('nobody@example.com', 'a long password'), undefined);
  t.equal(await other.verifyPassword('not an email', 'a long password'), undefined);
  await t.rejects(store.createAccount('bob@example.com', 'short', 'free'), { code: 'invalid_argument' });

  t.match(await other.setPlan('ann@example.com', 'enterprise'), { plan: 'enterprise' });
  t.match(await store.account('ann@example.com'), { plan: 'enterprise', status: 'active' });
  t.match(await other.setStatus('ann@example.com', 'suspended'), { status: 'suspended' });
  t.match(await store.setStatus('ann@example.com', 'active'), { status: 'active' });
  await t.rejects(store.setPlan('nobody@example.com', 'pro'), { code: 'account_missing' });

  const { key, record } = await store.createKey('ann@example.com', ' production ', ['203.0.113.0/24', '2001:db8::1']);
  t.match(key, /^ipr_[A-Za-z0-9_-]{43}$/);
  t.match(record, { account: 'ann@example.com', name: 'production', prefix: key.slice(0, 8), hash: keyDigest(key), revoked: null, lastUsed: null, allowed: ['203.0.113.0/24', '2001:db8::1'] });
  t.same(await other.keyByDigest(keyDigest(key)), record, 'found by digest through another connection');
  t.equal(await other.keyByDigest(keyDigest(`${key}x`)), undefined);
  t.equal(await other.keyByDigest('not a digest'), undefined);
  const second = await other.createKey('ann@example.com', 'staging');
  t.ok(second.record.id > record.id, 'ids are given out in order');
  t.same((await store.listKeys('ann@example.com')).map((k) => k.name), ['production', 'staging']);
  await t.rejects(store.createKey('nobody@example.com', 'x'), { code: 'account_missing' });
  await t.rejects(store.createKey('ann@example.com', '   '), { code: 'invalid_argument' });
  await t.rejects(store.createKey('ann@example.com', 'x', ['300.1.1.1']), { code: 'invalid_argument' });

  const allowed = await other.setAllowed('ann@example.com', record.prefix, []);
  t.same(allowed.allowed, []);
  t.same((await store.keyByDigest(record.hash))!.allowed, []);
  const revoked = await other.revokeKey('ann@example.com', record.prefix);
  t.match(revoked.revoked, /^\d{4}-\d\d-\d\dT/);
  t.equal((await store.keyByDigest(record.hash))!.revoked, revoked.revoked);
  t.equal((await store.revokeKey('ann@example.com', record.prefix)).revoked, revoked.revoked, 'revoking twice keeps the first time');

  await store.createAccount('eve@example.com', 'eve password!', 'free');
  await t.rejects(store.revokeKey('eve@example.com', second.record.prefix), { code: 'key_missing' }, "another customer's key is no such key");
  await t.rejects(store.setAllowed('eve@example.com', second.record.prefix, []), { code: 'key_missing' });
  t.same(await store.listKeys('eve@example.com'), []);
  t.equal((await store.keyByDigest(second.record.hash))!.revoked, null);
  await t.rejects(store.listKeys('nobody@example.com'), { code: 'account_missing' });

  // Every key is under the prefix, and one account's keys share one hash tag.
  const names = (await store.connection.command<string[]>(undefined, ['KEYS', '*'])).sort();
  t.ok(names.every((n) => n.startsWith('test-a:')), 'every key under the prefix');
  const tags = new Set(names.filter((n) => n.includes('{a:')).map((n) => /\{a:([0-9a-f]{16})\}/.exec(n)![1]));
  t.same([...tags].sort(), [accountTag('ann@example.com'), accountTag('eve@example.com')].sort());
});

t.test('sessions end with their TTL', async (t) => {
  const redis = await startRedis(t);
  const store = await RedisCustomerStore.open(redis.url);
  t.teardown(() => store.close());
  const session = { account: 'ann@example.com', csrf: 'c'.repeat(43), created: 1000, seen: 1000 };
  const id = await store.createSession(session, 400);
  t.match(id, /^[A-Za-z0-9_-]{43}$/);
  t.same(await store.session(id), session);
  const stored = (await store.connection.command<string[]>(undefined, ['KEYS', 'ipr:{s:*'])) as string[];
  t.same(stored, [`ipr:{s:${keyDigest(id)}}`], 'stored under the digest of the id, never the id');
  await store.touchSession(id, session, 2000, 1500);
  t.same(await store.session(id), { ...session, seen: 2000 });
  const ttl = await store.connection.command<number>(stored[0], ['PTTL', stored[0]!]);
  t.ok(ttl > 1000 && ttl <= 1500, `the touch set a new TTL (${ttl} ms)`);
  await store.endSession(id);
  t.equal(await store.session(id), undefined);
  await store.touchSession(id, session, 3000, 1500);
  t.equal(await store.session(id), undefined, 'a touch never brings an ended session back');
  const short = await store.createSession(session, 150);
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.equal(await store.session(short), undefined, 'gone after its TTL');
});

t.test('sign-in attempts in windows on the Redis clock', async (t) => {
  const redis = await startRedis(t);
  const store = await RedisCustomerStore.open(redis.url);
  t.teardown(() => store.close());
  const account = { name: 'sign-in:account:ann@example.com', max: 2, windowMs: 600 };
  const address = { name: 'sign-in:address:203.0.113.7', max: 3, windowMs: 600 };
  t.equal(await store.countAttempt([account, address], 0), 0);
  t.equal(await store.countAttempt([account, address], 0), 0);
  const wait = await store.countAttempt([account, address], 0);
  t.ok(wait > 0 && wait <= 600, `the third is refused for the rest of the window (${wait} ms)`);
  // The address had 2; the account is full: the address's count is not raised by a refused attempt.
  t.equal(await store.countAttempt([address], 0), 0, 'the address had room for one more');
  t.ok((await store.countAttempt([address], 0)) > 0, 'and now it is full');
  await store.forgetAttempt(account.name);
  t.equal(await store.countAttempt([account], 0), 0, 'a taken-back attempt frees its place');
  await store.forgetAttempt(account.name, true);
  t.equal(await store.countAttempt([account], 0), 0);
  t.equal(await store.countAttempt([account], 0), 0, 'all taken back: two more fit');

  // Parallel attempts from many connections never pass the limit.
  const others = await Promise.all(Array.from({ length: 4 }, () => RedisCustomerStore.open(redis.url)));
  t.teardown(() => Promise.all(others.map((o) => o.close())));
  const burst = { name: 'sign-in:account:bob@example.com', max: 5, windowMs: 5000 };
  const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => others[i % 4]!.countAttempt([burst], 0)));
  t.equal(answers.filter((w) => w === 0).length, 5, 'exactly max counted out of 40 parallel attempts');

  await new Promise((resolve) => setTimeout(resolve, 650));
  t.equal(await store.countAttempt([address], 0), 0, 'a new window after the last one ended');
});
