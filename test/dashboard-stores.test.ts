/**
 * The dashboard's sessions and sign-in limits (src/dashboard/sessions.ts)
 * behave the same whichever customer store serves them: the LMDB store of a
 * data folder, or Redis on a real redis-server (its sessions with a TTL).
 */
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { keyDigest } from '../src/store/accounts.js';
import { Sessions, SESSION_IDLE_MS } from '../src/dashboard/sessions.js';
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
  t.test(`${kind}: sessions end by sign-out everywhere, a new password, suspension`, async (t) => {
    const store = await open(t);
    t.teardown(() => store.close());
    const sessions = new Sessions(store, { now: () => Date.now() });
    await store.createAccount('ann@example.com', 'a long password', 'pro');

    const one = await sessions.signIn('Ann@Example.com', 'a long password', '192.0.2.1', null);
    const two = await sessions.signIn('ann@example.com', 'a long password', '198.51.100.1', null);
    t.match(await sessions.current(one.id), { account: { email: 'ann@example.com' } });
    if (store instanceof RedisCustomerStore) {
      const key = store.connection.key(`{s:${keyDigest(two.id)}}`);
      const ttl = await store.connection.command<number>(key, ['PTTL', key]);
      t.ok(ttl > SESSION_IDLE_MS - 5000 && ttl <= SESSION_IDLE_MS, `stored with the idle time as TTL (${ttl} ms)`);
    }

    await sessions.signOutEverywhere((await sessions.current(one.id))!);
    t.same([await sessions.current(one.id), await sessions.current(two.id)], [null, null], 'both ended');

    const three = await sessions.signIn('ann@example.com', 'a long password', '192.0.2.1', null);
    const four = await sessions.signIn('ann@example.com', 'a long password', '192.0.2.1', null);
    const changed = await sessions.changePassword((await sessions.current(three.id))!, 'a long password', 'another long password', '192.0.2.1');
    t.equal(await sessions.current(four.id), null, 'a new password ends the other sessions');
    t.equal(await sessions.current(three.id), null, 'and the one it was changed in');
    t.match(await sessions.current(changed.id), { account: { email: 'ann@example.com' } }, 'this browser goes on in a new one');

    await store.setStatus('ann@example.com', 'suspended');
    await store.setStatus('ann@example.com', 'active');
    t.equal(await sessions.current(changed.id), null, 'suspension ends it for good');
    await t.rejects(sessions.signIn('ann@example.com', 'a long password', '192.0.2.1', null), { code: 'sign_in_failed' }, 'the old password is gone');

    t.equal(await sessions.prune(), kind === 'lmdb' ? 4 : 0, kind === 'lmdb' ? 'the 4 sessions of earlier generations removed (the one a sign-in replaced is gone already)' : 'Redis ends them by TTL');
  });

  t.test(`${kind}: five wrong passwords of one client on one account, then refused`, async (t) => {
    const store = await open(t);
    t.teardown(() => store.close());
    const sessions = new Sessions(store, { now: () => Date.now() });
    await store.createAccount('bob@example.com', 'a long password', 'pro');
    for (let i = 0; i < 5; i++) await t.rejects(sessions.signIn('bob@example.com', 'wrong password', '192.0.2.7', null), { code: 'sign_in_failed' });
    await t.rejects(sessions.signIn('bob@example.com', 'a long password', '192.0.2.7', null), { code: 'sign_in_limited', details: { retry_after: Number } });
  });
}
