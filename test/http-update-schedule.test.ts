// `ipr serve --update-interval`: the server runs `ipr update` in the
// background; a changed feed reaches the answers without a restart, and every
// outcome (published, a source on its last good copy, a failed run) is logged
// and counted on the admin port.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import http from 'node:http';
import t from 'tap';
import { startFeedServer, torLists } from '../bench/feed-server.js';
import { feeds as feedsDir, runIpr, testDir } from './helpers.js';
import { accountStore, accountWithKey, check, startServer, type Server } from './server.js';

const tor = torLists(feedsDir);

/** The JSON log lines of the server's main thread about updates. */
function updateLogs(server: Server): { msg: string; result?: string; source?: string; reason?: string; error?: string; child?: number; level: number }[] {
  return server
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"event":"update"'))
    .map((l) => JSON.parse(l));
}

async function until<T>(what: () => Promise<T> | T, ok: (value: T) => boolean, ms = 30_000): Promise<T> {
  const started = Date.now();
  let value = await what();
  while (!ok(value) && Date.now() - started < ms) {
    await sleep(100);
    value = await what();
  }
  return value;
}

function get(port: number, urlPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: urlPath }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve(text));
      })
      .on('error', reject);
  });
}

t.test('scheduled updates publish a changed feed, log each outcome and count it', async (t) => {
  const feeds = await startFeedServer();
  t.teardown(() => feeds.close());
  feeds.route('/tor', { text: tor.current });
  feeds.route('/vpn', { file: path.join(feedsDir, 'vpn/ipv4.txt') });
  const dir = testDir(t);
  const sourcesFile = path.join(dir, 'feeds.sources.json');
  const sources = {
    sources: [
      { name: 'tor-exits', kind: 'tor', format: 'cidr-list', url: feeds.url('/tor') },
      { name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', url: feeds.url('/vpn') },
    ],
  };
  writeFileSync(sourcesFile, JSON.stringify(sources));
  const dataDir = path.join(dir, 'data');
  t.equal((await runIpr('update', '--sources', sourcesFile, '--data', dataDir)).code, 0, 'first snapshot published');

  const server = await startServer(t, { dataDir, workers: 1, args: ['--update-interval', '2s', '--sources', sourcesFile, '--admin-port', '0'] });
  const adminPort = Number(/admin port http:\/\/[^:]+:([0-9]+)/.exec(server.output())![1]);
  const key = await accountWithKey(accountStore(t, dataDir), 'ent@example.com', 'enterprise');
  t.equal((await check(server.port, key, { ip: tor.entered })).json.is_tor, false);

  feeds.route('/tor', { file: tor.older });
  const answer = await until(
    () => check(server.port, key, { ip: tor.entered }),
    (r) => r.json.is_tor === true,
  );
  t.equal(answer.json.is_tor, true, 'the changed Tor list answers without a restart');
  const published = await until(
    () => updateLogs(server),
    (logs) => logs.some((l) => l.result === 'published'),
  );
  t.ok(published.some((l) => l.msg === 'update started'), 'logged: update started');
  t.match(published.find((l) => l.result === 'published'), { level: 30, msg: 'update published a new snapshot', snapshot: /snap-.*\.mdb$/ });
  t.match(server.output(), /"msg":"serving a newly published snapshot"/);

  // The upstream breaks: the update keeps the last good copy, says which and why.
  feeds.route('/tor', { status: 404 });
  const fallback = await until(
    () => updateLogs(server),
    (logs) => logs.some((l) => l.source === 'tor-exits'),
  );
  t.match(fallback.find((l) => l.source === 'tor-exits'), { level: 40, msg: 'source tor-exits: the last good copy was used', reason: 'HTTP 404 Not Found' });
  t.equal((await check(server.port, key, { ip: tor.entered })).json.is_tor, true, 'still the last good data');

  // The configuration breaks: the run fails, the published snapshot keeps serving.
  writeFileSync(sourcesFile, '{ not json');
  const failed = await until(
    () => updateLogs(server),
    (logs) => logs.some((l) => l.result === 'failed'),
  );
  t.match(failed.find((l) => l.result === 'failed'), { level: 50, msg: 'update failed; the published snapshot keeps serving', error: /^ipr: sources .*feeds\.sources\.json: / });
  t.equal((await check(server.port, key, { ip: tor.entered })).status, 200);

  const metrics = await get(adminPort, '/metrics');
  t.match(metrics, /\nipr_updates_total\{result="published"\} [1-9]/);
  t.match(metrics, /\nipr_updates_total\{result="failed"\} [1-9]/);
  t.match(metrics, /\nipr_snapshot_swaps_total [1-9]/);
  t.match(metrics, /\nipr_update_last_success_timestamp_seconds 1[0-9.e+]+\n/);
  const status = JSON.parse(await get(adminPort, '/provenance')).updates;
  t.match(status, { interval_seconds: 2, sources: sourcesFile, running: Boolean, last: { result: String, started_at: String, finished_at: String } });

  t.equal(await server.stop(), 0, 'stops cleanly, an update running or not');
  const children = updateLogs(server).flatMap((l) => (l.child ? [l.child] : []));
  t.ok(children.length >= 3);
  t.same(
    children.filter((pid) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    }),
    [],
    'no update process outlives the server',
  );
});
