/**
 * The store interface (src/store/types.ts) answers the same on both stores:
 * the embedded LMDB store of a data folder and the Redis store on a real
 * redis-server. Routes, the dashboard and the CLI can then be written once.
 */
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { keyDigest } from '../src/store/accounts.js';
import { LmdbCustomerStore } from '../src/store/lmdb.js';
import { RedisCustomerStore } from '../src/store/redis.js';
import type { CustomerStore } from '../src/store/types.js';
import { testDir } from './helpers.js';
import { startRedis } from './redis.js';

const stores: [string, (t: Test) => Promise<CustomerStore>][] = [
  ['lmdb', async (t) => LmdbCustomerStore.open(path.join(testDir(t), 'data'))],
  ['redis', async (t) => RedisCustomerStore.open((await startRedis(t)).url)],
];

for (const [kind, open] of stores) {
  t.test(`${kind}: the store interface`, async (t) => {
    const store = await open(t);
    t.teardown(() => store.close());
    t.equal(store.kind, kind);
    const changes: string[] = [];
    const following = await store.follow(null, { change: (c) => void changes.push(c.type), resync: () => void changes.push('resync') });
    t.teardown(() => following.close());

    t.match(await store.createAccount('Ann@Example.com', 'a long password', 'pro'), { email: 'ann@example.com', plan: 'pro', status: 'active' });
    await t.rejects(store.createAccount('ann@example.com', 'a long password', 'pro'), { code: 'account_exists' });
    await t.rejects(store.createAccount('bob@example.com', 'short', 'pro'), { code: 'invalid_argument' });
    t.match(await store.verifyPassword('ann@example.com', 'a long password'), { email: 'ann@example.com' });
    t.equal(await store.verifyPassword('ann@example.com', 'not the password'), undefined);
    t.equal(await store.verifyPassword('nobody@example.com', 'a long password'), undefined);
    t.match(await store.setPlan('ann@example.com', 'free'), { plan: 'free' });
    t.match(await store.setStatus('ann@example.com', 'suspended'), { status: 'suspended' });
    t.match(await store.setStatus('ann@example.com', 'active'), { status: 'active' });
    await t.rejects(store.setPlan('nobody@example.com', 'free'), { code: 'account_missing' });
    t.equal(await store.account('nobody@example.com'), undefined);

    const { key, record } = await store.createKey('ann@example.com', 'prod', ['203.0.113.0/24']);
    t.match(record, { account: 'ann@example.com', name: 'prod', prefix: key.slice(0, 8), hash: keyDigest(key), revoked: null, lastUsed: null, allowed: ['203.0.113.0/24'] });
    t.same(await store.keyByDigest(keyDigest(key)), record);
    if (store instanceof LmdbCustomerStore) t.same(store.directory.keyByDigest(keyDigest(key)), record, 'and synchronously, as the request path reads it');
    t.equal(await store.keyByDigest(keyDigest('ipr_unknown')), undefined);
    await store.createKey('ann@example.com', 'dev');
    t.same((await store.listKeys('ann@example.com')).map((k) => k.name), ['prod', 'dev']);
    t.same((await store.setAllowed('ann@example.com', record.prefix, [])).allowed, []);
    t.match((await store.revokeKey('ann@example.com', record.prefix)).revoked, /^\d{4}-/);
    await store.createAccount('eve@example.com', 'eve password!', 'free');
    await t.rejects(store.revokeKey('eve@example.com', record.prefix), { code: 'key_missing' });
    await t.rejects(store.listKeys('nobody@example.com'), { code: 'account_missing' });
    t.same(await store.usageRange(record, '2026-01-01', '2026-12-31'), []);

    const session = { account: 'ann@example.com', csrf: 'x'.repeat(43), created: 1, seen: 1 };
    const id = await store.createSession(session, 60_000);
    t.same(await store.session(id), session);
    await store.touchSession(id, session, 5, 60_000);
    t.same(await store.session(id), { ...session, seen: 5 });
    await store.endSession(id);
    t.equal(await store.session(id), undefined);

    const limit = { name: 'sign-in:account:ann@example.com', max: 2, windowMs: 60_000 };
    const now = Date.now();
    t.equal(await store.countAttempt([limit], now), 0);
    t.equal(await store.countAttempt([limit], now), 0);
    t.ok((await store.countAttempt([limit], now)) > 0);
    await store.forgetAttempt(limit.name, true);
    t.equal(await store.countAttempt([limit], now), 0);

    const deadline = Date.now() + 3000;
    while (changes.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    t.ok(changes.length > 0, `the feed told of the changes (${kind === 'lmdb' ? 'as a resync' : 'one by one'}: ${changes.slice(0, 3).join(', ')}...)`);
  });
}
