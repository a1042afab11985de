/**
 * Snapshots across nodes (src/pipeline/distribute.ts) with a real
 * redis-server and real snapshots built from real feeds: the builder lock
 * (one holder, renewed while held, released only by its holder), a good
 * snapshot fetched over HTTP from the builder's handler and published by a
 * follower, and a follower keeping its last good snapshot when the digest
 * does not match, the size does not, the download fails, or the token is wrong.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { openSnapshot } from '../src/snapshot.js';
import { announce, announcePublished, currentNotice, fetchSnapshot, followSnapshots, serveSnapshotFile, withBuilderLock, type FetchOutcome } from '../src/pipeline/distribute.js';
import { publishedName, snapshotsDir } from '../src/pipeline/publish.js';
import { RedisConnection } from '../src/store/redis-connection.js';
import { buildFrom, feeds } from './helpers.js';
import { startRedis } from './redis.js';

const VPN = { name: 'vpn', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') };
const TOR = { name: 'tor', kind: 'tor', format: 'tor-csv', path: path.join(feeds, 'tor/exits.csv') };

/** The builder's side: a node:http server whose only route is the admin port's snapshot handler, behind a token. */
async function builderServer(t: Test, dataDir: string, token: string): Promise<string> {
  const server = http.createServer((req, res) => {
    if (req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401).end();
      return;
    }
    if (!serveSnapshotFile(dataDir, req, res)) res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function connect(t: Test, url: string): Promise<RedisConnection> {
  const connection = await RedisConnection.open(url);
  t.teardown(() => connection.close());
  return connection;
}

const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

t.test('the builder lock: one holder at a time, renewed while held, released only by its holder', async (t) => {
  const redis = await startRedis(t);
  const a = await connect(t, redis.url);
  const b = await connect(t, redis.url);
  let inside = false;
  const first = withBuilderLock(
    a,
    async () => {
      inside = true;
      await new Promise((resolve) => setTimeout(resolve, 900));
      return 'built';
    },
    { lockMs: 300 },
  );
  while (!inside) await new Promise((resolve) => setTimeout(resolve, 5));
  await new Promise((resolve) => setTimeout(resolve, 500));
  await t.rejects(withBuilderLock(b, async () => 'also'), { code: 'build_locked' }, 'held past its 300 ms: it is renewed');
  t.equal(await first, 'built');
  t.equal(await withBuilderLock(b, async () => 'second'), 'second', 'free once released');

  // A holder that lost the lock (it expired while it stalled) cannot release the next holder's.
  let lost = false;
  const stalled = withBuilderLock(a, () => new Promise((resolve) => setTimeout(resolve, 600)), { lockMs: 200, onLost: () => (lost = true) });
  await new Promise((resolve) => setTimeout(resolve, 50));
  redis.pause();
  await new Promise((resolve) => setTimeout(resolve, 300));
  redis.resume();
  const lock = 'ipr:{snapshots}:lock';
  await b.command(lock, ['DEL', lock]);
  await b.command(lock, ['SET', lock, 'another holder', 'PX', 10_000]);
  await stalled;
  t.ok(lost, 'the stalled holder noticed it lost the lock');
  t.equal(await b.command(lock, ['GET', lock]), 'another holder', "and left the next holder's lock alone");
});

t.test('a follower fetches, verifies and publishes the announced snapshot', async (t) => {
  const redis = await startRedis(t);
  const connection = await connect(t, redis.url);
  const builder = await buildFrom(t, [VPN, TOR], 'builder');
  const follower = await buildFrom(t, [VPN], 'follower');
  const token = 'a token of sixteen+ characters';
  const base = await builderServer(t, builder.dataDir, token);
  const before = publishedName(follower.dataDir)!;

  const outcomes: FetchOutcome[] = [];
  const following = await followSnapshots(connection, follower.dataDir, { token, onOutcome: (o) => outcomes.push(o) });
  t.teardown(() => following.close());
  const notice = await withBuilderLock(connection, () => announcePublished(connection, builder.dataDir, base));
  const builderFile = path.join(snapshotsDir(builder.dataDir), notice.name);
  t.match(notice, { name: publishedName(builder.dataDir), bytes: readFileSync(builderFile).length, sha256: sha256(builderFile), url: `${base}/snapshots/${notice.name}` });
  t.same(await currentNotice(connection), notice);

  const deadline = Date.now() + 10_000;
  while (outcomes.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  t.same(outcomes, [{ result: 'published', name: notice.name }]);
  t.not(publishedName(follower.dataDir), before);
  t.equal(publishedName(follower.dataDir), notice.name, 'the follower publishes the same snapshot');
  t.equal(sha256(path.join(snapshotsDir(follower.dataDir), notice.name)), notice.sha256, 'byte for byte');
  const fromBuilder = openSnapshot(builder.dataDir);
  const fromFollower = openSnapshot(follower.dataDir);
  t.teardown(() => (fromBuilder.close(), fromFollower.close()));
  const tor = readFileSync(TOR.path, 'utf8').split('\n')[1]!.split(',')[1]!.trim();
  t.equal(fromFollower.lookupJson(tor), fromBuilder.lookupJson(tor), 'and answers as the builder does (a Tor exit)');
  t.match(fromFollower.lookup(tor), { is_tor: true });
  t.same(await fetchSnapshot(follower.dataDir, notice, { token }), { result: 'current', name: notice.name }, 'a snapshot in hand is not fetched again');
});

t.test('a follower keeps its last good snapshot when the download is not what was announced', async (t) => {
  const redis = await startRedis(t);
  const connection = await connect(t, redis.url);
  const builder = await buildFrom(t, [VPN, TOR], 'builder');
  const follower = await buildFrom(t, [VPN], 'follower');
  const token = 'a token of sixteen+ characters';
  const base = await builderServer(t, builder.dataDir, token);
  const before = publishedName(follower.dataDir)!;
  const good = await announcePublished(connection, builder.dataDir, base);
  const kept = () => {
    t.equal(publishedName(follower.dataDir), before, 'the last good snapshot stays published');
    t.same(
      readFileSync(path.join(snapshotsDir(follower.dataDir), 'CURRENT'), 'utf8').trim(),
      before,
    );
    t.notOk(readFileSync(path.join(snapshotsDir(follower.dataDir), 'CURRENT'), 'utf8').includes(good.name));
  };

  const wrongDigest = { ...good, sha256: 'f'.repeat(64) };
  const refused = await fetchSnapshot(follower.dataDir, wrongDigest, { token });
  t.match(refused, { result: 'refused', name: good.name, reason: new RegExp(`SHA-256 ${good.sha256}, ${'f'.repeat(64)} announced`) });
  kept();
  t.match(await fetchSnapshot(follower.dataDir, { ...good, bytes: good.bytes - 1 }, { token }), { result: 'refused', reason: /more than the announced/ });
  kept();
  t.match(await fetchSnapshot(follower.dataDir, { ...good, bytes: good.bytes + 1 }, { token }), { result: 'refused', reason: new RegExp(`${good.bytes} bytes, ${good.bytes + 1} announced`) });
  kept();
  t.match(await fetchSnapshot(follower.dataDir, good, { token: 'the wrong token!!' }), { result: 'refused', reason: /answered 401/ });
  kept();
  t.match(await fetchSnapshot(follower.dataDir, { ...good, url: `${base}/snapshots/snap-20200101T000000000Z-00000000.mdb` }, { token }), { result: 'refused', reason: /answered 404/ });
  t.match(await fetchSnapshot(follower.dataDir, { ...good, url: 'http://127.0.0.1:1/snapshots/x' }, { token }), { result: 'refused', reason: /fetch failed/ });
  kept();
  const { readdirSync } = await import('node:fs');
  t.same(readdirSync(snapshotsDir(follower.dataDir)).filter((n) => n.endsWith('.partial')), [], 'no partial file left');

  // Announced through Redis, a bad digest is refused the same way, and said.
  const outcomes: FetchOutcome[] = [];
  const following = await followSnapshots(connection, follower.dataDir, { token, onOutcome: (o) => outcomes.push(o) });
  t.teardown(() => following.close());
  while (outcomes.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
  t.match(outcomes[0], { result: 'published' }, 'the good announcement at start is taken');
  const rebuilt = await buildFrom(t, [TOR], 'builder2');
  const base2 = await builderServer(t, rebuilt.dataDir, token);
  const next = await announcePublished(connection, rebuilt.dataDir, base2);
  while (outcomes.length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
  t.match(outcomes[1], { result: 'published', name: next.name }, 'a new good one is taken');
  const third = await buildFrom(t, [VPN, TOR], 'builder3');
  const base3 = await builderServer(t, third.dataDir, token);
  const name = publishedName(third.dataDir)!;
  const file = path.join(snapshotsDir(third.dataDir), name);
  await announce(connection, { name, bytes: readFileSync(file).length, sha256: '0'.repeat(64), url: `${base3}/snapshots/${name}`, announced: new Date().toISOString() });
  while (outcomes.length < 3) await new Promise((resolve) => setTimeout(resolve, 20));
  t.match(outcomes[2], { result: 'refused', name, reason: /SHA-256 [0-9a-f]{64}, 0{64} announced/ }, 'a bad digest is refused, and said');
  t.equal(publishedName(follower.dataDir), next.name, 'the last good snapshot keeps serving');
});
