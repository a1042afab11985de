// Snapshots swapped under load: a bounded load (a fixed number of requests
// over several keep-alive connections, one enterprise key, paced under its
// 100 per second) runs against a 2-worker server while three `ipr update`
// runs publish new snapshots. No request fails, and the answers follow each
// publication: once one answer shows the new data, every request sent after
// it does too (the workers share one mapping, swapped once for all).
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeFileSync } from 'node:fs';
import t from 'tap';
import { startFeedServer, torLists } from '../bench/feed-server.js';
import { feeds as feedsDir, runIpr, testDir } from './helpers.js';
import { accountStore, accountWithKey, check, startServer } from './server.js';

const TOTAL = 1200;
const CONNECTIONS = 4;
/** Between two requests of a connection: 4 connections stay under 80 requests a second. */
const PAUSE_MS = 50;

const tor = torLists(feedsDir);
type Version = 'current' | 'older';

/** Which Tor list an answer about a probe address comes from. */
function versionOf(ip: string, isTor: boolean): Version {
  return (ip === tor.left) === isTor ? 'current' : 'older';
}

t.test('three publications under load: every request answered 200, the answers switch with each', async (t) => {
  const feeds = await startFeedServer();
  t.teardown(() => feeds.close());
  feeds.route('/tor', { text: tor.current });
  feeds.route('/vpn', { file: path.join(feedsDir, 'vpn/ipv4.txt') });
  const dir = testDir(t);
  const sourcesFile = path.join(dir, 'feeds.sources.json');
  writeFileSync(
    sourcesFile,
    JSON.stringify({
      sources: [
        { name: 'tor-exits', kind: 'tor', format: 'cidr-list', url: feeds.url('/tor') },
        { name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', url: feeds.url('/vpn') },
      ],
    }),
  );
  const dataDir = path.join(dir, 'data');
  const update = () => runIpr('update', '--sources', sourcesFile, '--data', dataDir, '--json');
  t.equal((await update()).code, 0, 'first snapshot published');

  const server = await startServer(t, { dataDir, workers: 2 });
  const key = await accountWithKey(accountStore(t, dataDir), 'ent@example.com', 'enterprise');
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  t.teardown(() => agent.destroy());

  const seen: { sentAt: number; receivedAt: number; version: Version }[] = [];
  const statuses = new Map<number | string, number>();
  let issued = 0;
  const connection = async () => {
    while (issued < TOTAL) {
      const ip = issued++ % 2 === 0 ? tor.left : tor.entered;
      const sentAt = performance.now();
      try {
        const r = await check(server.port, key, { ip }, { agent });
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 200) seen.push({ sentAt, receivedAt: performance.now(), version: versionOf(ip, r.json.is_tor) });
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
        statuses.set(code, (statuses.get(code) ?? 0) + 1);
      }
      await sleep(PAUSE_MS);
    }
  };
  const load = Promise.all(Array.from({ length: CONNECTIONS }, connection));

  await sleep(500);
  const windows: { version: Version; started: number; firstSeen: number | null }[] = [];
  for (const version of ['older', 'current', 'older'] as const) {
    feeds.route('/tor', version === 'older' ? { file: tor.older } : { text: tor.current });
    const window = { version, started: performance.now(), firstSeen: null as number | null };
    windows.push(window);
    const r = await update();
    t.equal(r.code === 0 && JSON.parse(r.stdout).result, 'published', `update to the ${version} Tor list published`);
    const published = performance.now();
    while (window.firstSeen === null && performance.now() - published < 5000) {
      window.firstSeen = seen.find((s) => s.receivedAt > window.started && s.version === version)?.receivedAt ?? null;
      await sleep(20);
    }
    t.ok(window.firstSeen !== null, `the load saw the ${version} list ${Math.round(window.firstSeen! - published)} ms after the update ended`);
    await sleep(1000); // a second of answers from this snapshot before the next publication
  }
  const during = issued < TOTAL;
  await load;
  t.ok(during, 'the three publications happened while the load ran');
  t.same(Object.fromEntries(statuses), { 200: TOTAL }, `${TOTAL} requests, all 200`);
  windows.forEach((w, i) => {
    const until = windows[i + 1]?.started ?? Infinity;
    const after = seen.filter((s) => w.firstSeen !== null && s.sentAt > w.firstSeen && s.sentAt < until);
    t.ok(after.length > 0, `requests after publication ${i + 1}: ${after.length}`);
    t.same(new Set(after.map((s) => s.version)), new Set([w.version]), `every one answered from the ${w.version} list`);
  });
});
