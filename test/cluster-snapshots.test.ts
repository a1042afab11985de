/**
 * Snapshots across nodes through a real redis-server: a builder node
 * (`--announce`, its admin port serving its published snapshots) and a
 * follower (`--follow`) that starts on a small snapshot of its own. An
 * announcement whose SHA-256 does not match the file is refused and the
 * follower keeps serving what it had; the builder's real announcement is
 * fetched, verified, published and swapped in, and the follower's
 * /provenance says so. The builder lock keeps a second builder out.
 */
import path from 'node:path';
import t from 'tap';
import { announce, announcePublished, fileDigest, withBuilderLock } from '../src/pipeline/distribute.js';
import { publishedName, snapshotsDir } from '../src/pipeline/publish.js';
import { RedisConnection } from '../src/store/redis-connection.js';
import { buildFrom, feeds, runIpr } from './helpers.js';
import { startRedis } from './redis.js';
import { admin, adminAddress, dataDirWithFullSnapshot, startServer } from './server.js';

const TOKEN = 'a shared admin token of the nodes';

t.test('a follower refuses a snapshot whose digest does not match, then fetches, verifies and serves the builder\'s', async (t) => {
  const redis = await startRedis(t);
  const connection = await RedisConnection.open(redis.url);
  t.teardown(() => connection.close());
  const env = { IPR_ADMIN_TOKEN: TOKEN };

  const builderDir = dataDirWithFullSnapshot(t, 'builder');
  const builder = await startServer(t, {
    dataDir: builderDir,
    workers: 1,
    env,
    // The fixture is fresh: no update runs within a day, so the builder only serves its files here.
    args: ['--store', redis.url, '--admin-port', '0', '--update-interval', '1d', '--sources', path.join(feeds, 'README.md'), '--announce', 'http://127.0.0.1:0'],
  });
  const base = `http://127.0.0.1:${adminAddress(builder).port}`;

  const { dataDir: followerDir } = await buildFrom(t, [{ name: 'vpn', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') }], 'follower');
  const own = publishedName(followerDir)!;
  const follower = await startServer(t, { dataDir: followerDir, workers: 1, env, args: ['--store', redis.url, '--follow', '--admin-port', '0'] });
  const provenance = async () => JSON.parse((await admin(adminAddress(follower).port, '/provenance', { token: TOKEN })).text) as { snapshot: { path: string } };

  const published = publishedName(builderDir)!;
  t.not(published, own, 'two different snapshots');
  const real = { name: published, ...(await fileDigest(path.join(snapshotsDir(builderDir), published))), url: `${base}/snapshots/${published}` };
  const served = await admin(adminAddress(builder).port, `/snapshots/${published}`, { method: 'HEAD', token: TOKEN });
  t.equal(served.status, 200, 'the builder\'s admin port serves the file');
  t.equal(Number(served.headers['content-length']), real.bytes);
  t.equal((await admin(adminAddress(builder).port, `/snapshots/${published}`, { method: 'HEAD' })).status, 401, 'behind the admin token');

  // First a notice that lies about the file: refused, the follower keeps its own snapshot.
  await announce(connection, { ...real, sha256: '0'.repeat(64), announced: new Date().toISOString() });
  const deadline = Date.now() + 60_000;
  while (!/announced snapshot was refused/.test(follower.output()) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  t.match(follower.output(), /announced snapshot was refused/, 'the follower says why');
  t.match(follower.output(), /SHA-256|sha256|digest/i, 'the digest did not match');
  t.equal(publishedName(followerDir), own, 'nothing was published');
  t.match((await provenance()).snapshot.path, own, 'still serving its own snapshot');

  // Then the builder's own announcement (as ipr update --announce makes it): fetched, verified, published and swapped in.
  t.match(await announcePublished(connection, builderDir, base), { ...real, announced: String }, 'announced as the file is');
  while (publishedName(followerDir) !== published && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(publishedName(followerDir), published, 'the follower published the builder\'s snapshot');
  while (!(await provenance()).snapshot.path.endsWith(published) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  t.match((await provenance()).snapshot.path, published, 'and serves it (/provenance)');

  // Two builders never build at once: an update while another holds the lock is refused.
  await withBuilderLock(connection, async () => {
    const second = await runIpr('update', '--data', builderDir, '--sources', path.join(feeds, 'README.md'), '--store', redis.url, '--announce', base);
    t.equal(second.code, 1);
    t.match(second.stderr, /another node is building/);
  });
});
