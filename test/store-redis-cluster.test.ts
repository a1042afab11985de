/**
 * The Redis store on a Redis Cluster of three masters made with
 * `redis-cli --cluster create` on loopback: one customer's keys in one hash
 * slot (so its scripts run), customers spread over the masters, keys found
 * by digest from another connection, the change stream followed, the
 * sign-in limits and session generations, and the daily limit exact through
 * the lease script.
 */
import t from 'tap';
import { dayOf } from '../src/store/accounts.js';
import type { Change } from '../src/store/types.js';
import { accountKeys, accountTag, RedisCustomerStore } from '../src/store/redis.js';
import { rawCommand, runLeaseNodes, startRedisCluster } from './redis.js';

t.test('accounts, keys, changes and leases on a three-master cluster', async (t) => {
  const cluster = await startRedisCluster(t);
  const store = await RedisCustomerStore.open(cluster.url);
  const other = await RedisCustomerStore.open(cluster.url);
  t.teardown(async () => {
    await store.close();
    await other.close();
  });
  const seen: Change[] = [];
  const following = await other.follow(null, { change: (c) => void seen.push(c), resync: () => undefined });
  t.teardown(() => following.close());

  const emails = Array.from({ length: 12 }, (_, i) => `user${i}@example.com`);
  const made = [];
  for (const email of emails) {
    await store.createAccount(email, 'a long password', 'small');
    made.push((await store.createKey(email, 'k')).record);
  }
  for (const record of made) t.same(await other.keyByDigest(record.hash), record);

  // Every key of one account in one slot; the customers on every master.
  const slotOf = async (key: string) => Number((await rawCommand(cluster.nodes[0]!.port, `CLUSTER KEYSLOT ${key}`)).slice(1));
  for (const email of emails.slice(0, 3)) {
    const k = accountKeys(store.connection, accountTag(email));
    const slots = new Set(await Promise.all([k.account, k.keys, k.prefixes, k.revoked, k.allowed, k.lastUsed, k.unpublished, k.usage(1), k.lease(1)].map(slotOf)));
    t.equal(slots.size, 1, `${email}: one slot`);
  }
  const sizes = await Promise.all(cluster.nodes.map(async (n) => Number((await rawCommand(n.port, 'DBSIZE')).slice(1))));
  t.ok(sizes.every((n) => n > 0), `keys on every master (${sizes.join(', ')})`);

  await other.revokeKey(emails[0]!, made[0]!.prefix);
  const deadline = Date.now() + 5000;
  while (!seen.some((c) => c.type === 'key-revoked') && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
  t.match(seen.find((c) => c.type === 'key-revoked'), { account: emails[0], key: made[0]!.id, digest: made[0]!.hash });
  t.equal(seen.filter((c) => c.type === 'key-created').length, 12);

  // The sign-in limits' script touches two keys of one account's slot; a session generation bumps in the account's hash.
  const rules = { windowMs: 60_000, maxPerAccountAndClient: 1, maxPerClient: 30, slowFromFailures: 5, maxWaitMs: 8000 };
  t.same(await store.admitSignIn(emails[2]!, '192.0.2.1', rules, 0), { waitMs: 0 });
  await store.signInFailed(emails[2]!, rules, 0);
  t.match(await other.admitSignIn(emails[2]!, '192.0.2.1', rules, 0), { refusedMs: Number }, 'refused from another connection');
  await other.signInSucceeded(emails[2]!, '192.0.2.1');
  t.same(await store.admitSignIn(emails[2]!, '192.0.2.1', rules, 0), { waitMs: 0 });
  t.equal((await other.setPassword(emails[2]!, 'a new long password')).sessionGeneration, 1);
  t.equal((await store.setStatus(emails[3]!, 'suspended')).sessionGeneration, 1);
  t.same((await store.createKeys(emails[4]!, ['b1', 'b2'])).map((m) => m.record.name), ['b1', 'b2']);

  const record = made[1]!;
  const plan = { name: 'small', requestsPerDay: 150, requestsPerSecond: 100_000 };
  const results = await runLeaseNodes(t, [0, 1].map(() => ({ url: cluster.url, keys: [{ id: record.id, account: record.account, plan }], ms: 2000 })));
  t.equal(results[0]!.admitted[0]! + results[1]!.admitted[0]!, 150, 'the daily limit exact across two nodes');
  const today = dayOf(Date.now());
  t.same(await store.usageRange(record, today, today), [{ day: today, requests: 150 }]);
});
