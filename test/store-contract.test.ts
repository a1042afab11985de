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
import { admitSignIn } from '../src/store/sign-in.js';
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

    // Sessions end by the account's generation: suspension, sign out everywhere, a new password.
    t.equal((await store.account('ann@example.com'))!.sessionGeneration, 1, 'the suspension ended the sessions');
    t.equal((await store.endSessions('ann@example.com')).sessionGeneration, 2);
    t.equal((await store.setPlan('ann@example.com', 'free')).sessionGeneration, 2, 'a plan ends no session');
    t.match(await store.setPassword('ann@example.com', 'another long password'), { email: 'ann@example.com', sessionGeneration: 3 });
    t.equal(await store.verifyPassword('ann@example.com', 'a long password'), undefined, 'the old password is gone');
    t.match(await store.verifyPassword('ann@example.com', 'another long password'), { email: 'ann@example.com', sessionGeneration: 3 });
    await t.rejects(store.setPassword('ann@example.com', 'short'), { code: 'invalid_argument' });
    await t.rejects(store.setPassword('nobody@example.com', 'a long password'), { code: 'account_missing' });
    await t.rejects(store.endSessions('nobody@example.com'), { code: 'account_missing' });

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
    t.same(await store.keyToday(record, Date.now()), { requests: 0, lastUsed: null });
    await t.rejects(store.createKey('ann@example.com', 'bell\u0007'), { code: 'invalid_argument' });
    await t.rejects(store.createKey('ann@example.com', ' '), { code: 'invalid_argument' });

    const batch = await store.createKeys('eve@example.com', ['a', 'b', 'c'], ['10.0.0.0/8']);
    t.same(
      batch.map((b) => [b.record.name, b.record.allowed, b.key.slice(0, 8)]),
      ['a', 'b', 'c'].map((name, i) => [name, ['10.0.0.0/8'], batch[i]!.record.prefix]),
    );
    await t.rejects(store.createKeys('eve@example.com', ['d', ''], []), { code: 'invalid_argument' });
    t.same((await store.listKeys('eve@example.com')).map((k) => k.name), ['a', 'b', 'c'], 'a bad name makes no key of the batch');
    t.same((await store.listAccounts()).map((a) => a.email), ['ann@example.com', 'eve@example.com']);

    if (store instanceof LmdbCustomerStore) {
      t.equal(await store.keySlots(), 1 << 20);
      store.store.setKeySlots(6); // 4 active keys hold a slot
      await store.createKey('eve@example.com', 'fits');
      await t.rejects(store.createKey('eve@example.com', 'reserved', [], 1), { code: 'key_slots_full' }, 'the last slot is kept for the operator');
      await store.createKey('eve@example.com', 'last');
      await t.rejects(store.createKey('eve@example.com', 'none left'), { code: 'key_slots_full' });
    } else {
      t.equal(await store.keySlots(), null, 'no slots in a shared store');
      await store.createKey('eve@example.com', 'any reserve', [], 1_000_000_000);
    }
    await store.countRefusal('keys_per_day');
    await store.countRefusal('keys_per_day');
    t.equal((await store.refusals()).get('keys_per_day'), 2);

    const session = { account: 'ann@example.com', csrf: 'x'.repeat(43), created: 1, seen: 1 };
    const id = await store.createSession(session, 60_000);
    t.same(await store.session(id), session);
    await store.touchSession(id, session, 5, 60_000);
    t.same(await store.session(id), { ...session, seen: 5 });
    await store.endSession(id);
    t.equal(await store.session(id), undefined);
    const old = await store.createSession({ ...session, generation: 0 }, 60_000);
    const kept = await store.createSession({ ...session, generation: 3 }, 60_000);
    const pruned = await store.pruneDashboardState((s, account) => s.generation !== account?.sessionGeneration, Date.now());
    t.same([await store.session(old), await store.session(kept)], kind === 'lmdb' ? [undefined, { ...session, generation: 3 }] : [{ ...session, generation: 0 }, { ...session, generation: 3 }]);
    t.equal(pruned, kind === 'lmdb' ? 1 : 0, kind === 'lmdb' ? 'LMDB removes what is over' : 'Redis ends sessions by TTL');

    const limit = { name: 'sign-in:account:ann@example.com', max: 2, windowMs: 60_000 };
    const now = Date.now();
    t.equal(await store.countAttempt([limit], now), 0);
    t.equal(await store.countAttempt([limit], now), 0);
    t.ok((await store.countAttempt([limit], now)) > 0);
    await store.forgetAttempt(limit.name, true);
    t.equal(await store.countAttempt([limit], now), 0);

    await store.forgetAttempt(limit.name, true);

    // Sign-in limits: 3 a client on an account, 4 a client, slowed from 2 failures of an account, waits up to 2.5 s.
    const rules = { windowMs: 60_000, maxPerAccountAndClient: 3, maxPerClient: 4, slowFromFailures: 2, maxWaitMs: 2500 };
    const admit = (account: string, client: string) => store.admitSignIn(account, client, rules, now);
    t.same(await admit('ann@example.com', '192.0.2.1'), { waitMs: 0 });
    await store.signInFailed('ann@example.com', rules, now);
    t.same(await admit('ann@example.com', '192.0.2.1'), { waitMs: 0 });
    await store.signInFailed('ann@example.com', rules, now);
    t.same(await admit('ann@example.com', '192.0.2.2'), { waitMs: 1000 }, 'slowed: a new client waits the delay');
    t.same(await admit('ann@example.com', '192.0.2.1'), { waitMs: 1000 }, 'a client that tried before takes the next turn');
    const turn = await admit('ann@example.com', '192.0.2.2');
    t.ok('waitMs' in turn && turn.waitMs > 1500 && turn.waitMs <= 2000, `and the turn after it (${JSON.stringify(turn)})`);
    const tooFar = await admit('ann@example.com', '192.0.2.2');
    t.ok('refusedMs' in tooFar && tooFar.refusedMs > 1500 && tooFar.refusedMs <= 2000, `a turn past the longest wait is refused (${JSON.stringify(tooFar)})`);
    t.match(await admit('ann@example.com', '192.0.2.1'), { refusedMs: Number }, 'the client has used its attempts on the account');
    await store.signInSucceeded('ann@example.com', '192.0.2.1');
    t.same(await admit('eve@example.com', '192.0.2.1'), { waitMs: 0 }, 'a success took back one attempt of the client');
    t.same(await admit('eve@example.com', '192.0.2.1'), { waitMs: 0 });
    t.match(await admit('eve@example.com', '192.0.2.1'), { refusedMs: Number }, 'the client has used its attempts over every account');
    t.same(await admit('ann@example.com', '192.0.2.3'), { waitMs: 1000 }, 'refusals counted nothing: the account still has 2 failures');

    const deadline = Date.now() + 3000;
    while (changes.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    t.ok(changes.length > 0, `the feed told of the changes (${kind === 'lmdb' ? 'as a resync' : 'one by one'}: ${changes.slice(0, 3).join(', ')}...)`);
  });
}

t.test('a sign-in step applied after a later one: told at most the longest wait', async (t) => {
  const rules = { windowMs: 60_000, maxPerAccountAndClient: 5, maxPerClient: 30, slowFromFailures: 5, maxWaitMs: 8000 };
  const now = 1_000_000;
  // A later attempt (now + 300) took the turn at now + 300 + 8000 before this one was applied.
  const counts = [{ count: 1, ends: now + 60_000 }, { count: 1, ends: now + 60_000 }, { count: 20, ends: now + 60_000, turn: now + 8300 }];
  t.same(admitSignIn(counts, rules, now).result, { refusedMs: 8000 });
  t.same(admitSignIn(counts, rules, now + 300).result, { refusedMs: 8000 });
  t.same(admitSignIn(counts, rules, now + 1300).result, { refusedMs: 7000 });
});
