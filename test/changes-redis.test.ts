/**
 * The change stream of the Redis store (src/store/redis-changes.ts) on a
 * real redis-server: revocations seen by a follower (another connection, as
 * another node) within a second, p99 over 100; after a Redis restart and
 * after SIGSTOP/SIGCONT; a trimmed stream answered by a resync; a change
 * whose writer failed before its stream entry published by the outbox sweep.
 */
import t from 'tap';
import type { Test } from 'tap';
import type { Change, ChangeFollower } from '../src/store/types.js';
import { RedisCustomerStore } from '../src/store/redis.js';
import { startRedis } from './redis.js';

/** A follower on its own store connection that records each change with the time it arrived. */
async function follower(t: Test, url: string, from: string | null = null) {
  const store = await RedisCustomerStore.open(url);
  const seen: { change: Change; at: number }[] = [];
  let resyncs = 0;
  const following: ChangeFollower = await store.follow(from, {
    change: (change) => {
      seen.push({ change, at: Date.now() });
    },
    resync: () => {
      resyncs++;
    },
  });
  t.teardown(async () => {
    await following.close();
    await store.close();
  });
  return { seen, following, resyncs: () => resyncs };
}

async function until(what: string, ok: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Waits until the writer's own connection answers again (it reconnects by itself). */
async function answering(store: RedisCustomerStore): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await store.connection.command(undefined, ['PING']);
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

t.test('revocations reach a follower within a second (p99 over 100)', async (t) => {
  const redis = await startRedis(t);
  const writer = await RedisCustomerStore.open(redis.url);
  t.teardown(() => writer.close());
  await writer.createAccount('ann@example.com', 'a long password', 'pro');
  const keys = [];
  for (let i = 0; i < 100; i++) keys.push((await writer.createKey('ann@example.com', `k${i}`)).record);
  const { seen } = await follower(t, redis.url);
  await until('the follower reading', () => true);
  const delays: number[] = [];
  for (const record of keys) {
    const made = Date.now();
    await writer.revokeKey('ann@example.com', record.prefix);
    await until(`revocation of ${record.prefix}`, () => seen.some((s) => s.change.type === 'key-revoked' && s.change.digest === record.hash));
    delays.push(seen.find((s) => s.change.type === 'key-revoked' && s.change.digest === record.hash)!.at - made);
  }
  delays.sort((a, b) => a - b);
  const p50 = delays[49]!;
  const p99 = delays[98]!;
  t.ok(p99 < 1000, `p50 ${p50} ms, p99 ${p99} ms, max ${delays[99]} ms`);
  t.same(
    seen.filter((s) => s.change.type === 'key-revoked').map((s) => s.change),
    keys.map((k) => ({ type: 'key-revoked', account: 'ann@example.com', key: k.id, digest: k.hash })),
    'each revocation once, in order, naming the account, key and digest',
  );
});

t.test('every kind of change is announced', async (t) => {
  const redis = await startRedis(t);
  const writer = await RedisCustomerStore.open(redis.url);
  t.teardown(() => writer.close());
  const { seen } = await follower(t, redis.url);
  await writer.createAccount('bob@example.com', 'a long password', 'free');
  const { record } = await writer.createKey('bob@example.com', 'k');
  await writer.setAllowed('bob@example.com', record.prefix, ['203.0.113.0/24']);
  await writer.setPlan('bob@example.com', 'pro');
  await writer.setStatus('bob@example.com', 'suspended');
  await writer.revokeKey('bob@example.com', record.prefix);
  await t.rejects(writer.revokeKey('bob@example.com', 'ipr_none'), { code: 'key_missing' });
  await t.rejects(writer.createAccount('bob@example.com', 'a long password', 'free'), { code: 'account_exists' });
  await until('six changes', () => seen.length >= 6);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const account = 'bob@example.com';
  const key = { key: record.id, digest: record.hash };
  t.same(
    seen.map((s) => s.change),
    [
      { type: 'account-created', account },
      { type: 'key-created', account, ...key },
      { type: 'key-allowed', account, ...key },
      { type: 'account-plan', account },
      { type: 'account-status', account },
      { type: 'key-revoked', account, ...key },
    ],
    'one entry per change, none for a change refused',
  );
});

t.test('after a Redis restart and after SIGSTOP/SIGCONT, the follower goes on where it was', async (t) => {
  const redis = await startRedis(t);
  const writer = await RedisCustomerStore.open(redis.url);
  t.teardown(() => writer.close());
  await writer.createAccount('cat@example.com', 'a long password', 'pro');
  const made = [];
  for (let i = 0; i < 3; i++) made.push((await writer.createKey('cat@example.com', `k${i}`)).record);
  const { seen, following } = await follower(t, redis.url);

  await redis.kill();
  await redis.restart();
  await until('the follower back', () => following.connected, 10_000);
  await answering(writer);
  let at = Date.now();
  await writer.revokeKey('cat@example.com', made[0]!.prefix);
  await until('the revocation after a restart', () => seen.some((s) => s.change.type === 'key-revoked' && s.change.digest === made[0]!.hash), 3000);
  t.ok(Date.now() - at < 1000, `seen ${Date.now() - at} ms after a restart`);

  redis.pause();
  await new Promise((resolve) => setTimeout(resolve, 3000));
  redis.resume();
  await answering(writer);
  at = Date.now();
  await writer.revokeKey('cat@example.com', made[1]!.prefix);
  await until('the revocation after SIGCONT', () => seen.some((s) => s.change.type === 'key-revoked' && s.change.digest === made[1]!.hash), 5000);
  t.ok(Date.now() - at < 1000, `seen ${Date.now() - at} ms after SIGSTOP/SIGCONT`);

  // Missed while the follower was away: replayed from its position.
  const position = following.position;
  await following.close();
  await writer.revokeKey('cat@example.com', made[2]!.prefix);
  const again = await follower(t, redis.url, position);
  await until('the missed revocation', () => again.seen.some((s) => s.change.type === 'key-revoked' && s.change.digest === made[2]!.hash));
  t.equal(again.resyncs(), 0, 'no resync needed');
});

t.test('a stream trimmed past the position, or emptied, means a full resync', async (t) => {
  const redis = await startRedis(t);
  const writer = await RedisCustomerStore.open(redis.url);
  t.teardown(() => writer.close());
  await writer.createAccount('dan@example.com', 'a long password', 'pro');
  const first = await follower(t, redis.url);
  await writer.createKey('dan@example.com', 'a');
  await until('one change', () => first.seen.length === 1);
  const position = first.following.position!;
  await first.following.close();
  await writer.createKey('dan@example.com', 'b');
  const stream = 'ipr:{changes}';
  await writer.connection.command(stream, ['XTRIM', stream, 'MAXLEN', 0]);
  const trimmed = await follower(t, redis.url, position);
  await until('a resync', () => trimmed.resyncs() === 1);
  t.same(trimmed.seen, [], 'nothing to replay: it was trimmed');
  await writer.createKey('dan@example.com', 'c');
  await until('the next change', () => trimmed.seen.length === 1);

  await trimmed.following.close();
  await writer.connection.command(stream, ['DEL', stream]);
  const lost = await follower(t, redis.url, trimmed.following.position);
  await until('a resync after the stream was lost', () => lost.resyncs() === 1);
});

t.test('a change written but never announced is published by the outbox sweep', async (t) => {
  const redis = await startRedis(t);
  const writer = await RedisCustomerStore.open(redis.url);
  t.teardown(() => writer.close());
  await writer.createAccount('eve@example.com', 'a long password', 'pro');
  const { record } = await writer.createKey('eve@example.com', 'k');
  // The stream key holds a string: XADD fails after the revocation was written, as if the writer had died there.
  const stream = 'ipr:{changes}';
  const entries = await writer.connection.command<[string, string[]][]>(stream, ['XRANGE', stream, '-', '+']);
  await writer.connection.command(stream, ['DEL', stream]);
  await writer.connection.command(stream, ['SET', stream, 'not a stream']);
  await t.rejects(writer.revokeKey('eve@example.com', record.prefix), /WRONGTYPE/);
  t.match((await writer.keyByDigest(record.hash))!.revoked, /^\d{4}-/, 'the revocation itself was written');
  await writer.connection.command(stream, ['DEL', stream]);
  for (const [, fields] of entries) await writer.connection.command(stream, ['XADD', stream, '*', ...fields]);
  const { seen } = await follower(t, redis.url);
  t.equal(await writer.sweepOutbox(60_000), 0, 'within the grace period the writer may still finish');
  t.equal(await writer.sweepOutbox(0), 1, 'past it, the change is published');
  t.equal(await writer.sweepOutbox(0), 0, 'once');
  await until('the revocation', () => seen.some((s) => s.change.type === 'key-revoked'));
  t.same(await writer.connection.command(undefined, ['ZCARD', 'ipr:{outbox}']), 0, 'the outbox is empty');
});
