// `ipr update` against a local HTTP server of the real feeds (bench/feed-server.js,
// standing in for the upstreams): conditional requests and 304s, a changed
// feed changing the answers, and every way a download can go wrong keeping
// the last good copy, with the reason reported and recorded.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startFeedServer, torLists } from '../bench/feed-server.js';
import { feeds as feedsDir, runIpr, testDir } from './helpers.js';

const tor = torLists(feedsDir);
const VPN_IP = '2.26.157.1'; // vpn/ipv4.txt
const PROXY_IP = '144.31.222.106'; // proxy/proxies.txt
const DATACENTER_IP = '1.12.32.1'; // datacenter/ipv4.txt (1.12.32.0/23)

type Feeds = Awaited<ReturnType<typeof startFeedServer>>;

/** A feed server with the current Tor list, VPN, datacenter and proxy feeds; a sources file naming it. */
async function setUp(t: Parameters<typeof testDir>[0], extra: Record<string, object> = {}) {
  const feeds = await startFeedServer();
  t.teardown(() => feeds.close());
  feeds.route('/tor', { text: tor.current });
  feeds.route('/vpn', { file: path.join(feedsDir, 'vpn/ipv4.txt') });
  feeds.route('/datacenter', { file: path.join(feedsDir, 'datacenter/ipv4.txt') });
  feeds.route('/proxies', { file: path.join(feedsDir, 'proxy/proxies.txt') });
  const sources = [
    { name: 'tor-exits', kind: 'tor', format: 'cidr-list', url: feeds.url('/tor') },
    { name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', url: feeds.url('/vpn') },
    { name: 'datacenter-ipv4', kind: 'hosting', format: 'cidr-list', url: feeds.url('/datacenter') },
    { name: 'proxies', kind: 'proxy', format: 'proxy-list', url: feeds.url('/proxies') },
  ].map((s) => ({ ...s, ...extra[s.name] }));
  const dir = testDir(t);
  const sourcesFile = path.join(dir, 'feeds.sources.json');
  writeFileSync(sourcesFile, JSON.stringify({ sources }));
  const dataDir = path.join(dir, 'data');
  const update = async (...args: string[]) => {
    const r = await runIpr('update', '--sources', sourcesFile, '--data', dataDir, '--json', ...args);
    return { ...r, report: r.code === 0 ? JSON.parse(r.stdout) : null };
  };
  return { feeds, dataDir, update };
}

async function lookup(dataDir: string, ip: string) {
  const r = await runIpr('lookup', ip, '--data', dataDir);
  return JSON.parse(r.stdout);
}

async function info(dataDir: string) {
  return JSON.parse((await runIpr('info', '--data', dataDir)).stdout);
}

/** Exit 0; on failure the message is what the command printed. */
function exitedOk(t: Parameters<typeof testDir>[0], r: { code: number | null; stderr: string }) {
  t.equal(r.code, 0, r.code === 0 ? 'exit 0' : r.stderr);
}

const statusOf = (report: { sources: { name: string; status: string }[] }) => Object.fromEntries(report.sources.map((s) => [s.name, s.status]));
const newRequests = (feeds: Feeds, from: number) => feeds.requests.slice(from);

t.test('the first update downloads and publishes; the second asks conditionally, gets 304s and keeps the snapshot', async (t) => {
  const { feeds, dataDir, update } = await setUp(t);
  const first = await update();
  exitedOk(t, first);
  t.equal(first.report.result, 'published');
  t.same(statusOf(first.report), { 'tor-exits': 'downloaded', 'vpn-ipv4': 'downloaded', 'datacenter-ipv4': 'downloaded', proxies: 'downloaded' });
  t.same(feeds.requests.map((r) => [r.status, r.ifNoneMatch]), [[200, null], [200, null], [200, null], [200, null]], 'plain requests the first time');
  t.match(first.stderr, /downloaded 4\/4 sources/, 'download progress on stderr');
  t.equal((await lookup(dataDir, tor.left)).is_tor, true);
  t.equal((await lookup(dataDir, VPN_IP)).is_vpn, true);

  const described = await info(dataDir);
  t.equal(described.path, first.report.snapshot);
  t.ok(described.age_seconds >= 0 && described.age_seconds < 120, `age ${described.age_seconds} s`);
  const torSource = described.meta.sources.find((s: { name: string }) => s.name === 'tor-exits');
  t.match(torSource, {
    location: feeds.url('/tor'),
    http_status: 200,
    etag: /^"[0-9a-f]{40}"$/,
    last_modified: String,
    fetched_at: /^\d{4}-\d\d-\d\dT/,
    checked_at: /^\d{4}-\d\d-\d\dT/,
    sha256: /^[0-9a-f]{64}$/,
    records: tor.current.trim().split('\n').length,
    bad_lines: 0,
    used_last_good_copy: false,
  });

  const asked = feeds.requests.length;
  const second = await update();
  exitedOk(t, second);
  t.equal(second.report.result, 'unchanged');
  t.equal(second.report.snapshot, first.report.snapshot, 'the published snapshot stays');
  t.same(statusOf(second.report), { 'tor-exits': 'not_modified', 'vpn-ipv4': 'not_modified', 'datacenter-ipv4': 'not_modified', proxies: 'not_modified' });
  const conditional = newRequests(feeds, asked);
  t.equal(conditional.length, 4);
  for (const r of conditional) {
    t.equal(r.status, 304, `${r.path}: 304`);
    t.match(r.ifNoneMatch, /^"[0-9a-f]{40}"$/, `${r.path}: If-None-Match sent`);
    t.match(r.ifModifiedSince, /GMT$/, `${r.path}: If-Modified-Since sent`);
  }
  t.equal(readdirSync(path.join(dataDir, 'snapshots')).filter((n) => n.endsWith('.mdb')).length, 1, 'no new snapshot file');

  const forced = await update('--force');
  t.equal(forced.report.result, 'published', '--force builds anyway');
  t.not(forced.report.snapshot, first.report.snapshot);
});

t.test('a changed Tor list changes the answers for the addresses that entered or left it', async (t) => {
  const { feeds, dataDir, update } = await setUp(t);
  t.equal((await update()).report.result, 'published');
  t.match(await lookup(dataDir, tor.left), { is_tor: true, recommendation: 'block' });
  t.match(await lookup(dataDir, tor.entered), { is_tor: false });

  feeds.route('/tor', { file: tor.older });
  const changed = await update();
  t.equal(changed.report.result, 'published');
  t.same(statusOf(changed.report), { 'tor-exits': 'downloaded', 'vpn-ipv4': 'not_modified', 'datacenter-ipv4': 'not_modified', proxies: 'not_modified' });
  t.match(await lookup(dataDir, tor.left), { is_tor: false }, `${tor.left} left the list`);
  t.match(await lookup(dataDir, tor.entered), { is_tor: true, recommendation: 'block' }, `${tor.entered} entered it`);
  const torSource = (await info(dataDir)).meta.sources.find((s: { name: string }) => s.name === 'tor-exits');
  t.equal(torSource.records, readFileSync(tor.older, 'utf8').trim().split('\n').length);
});

t.test('a feed that fails, hangs, is cut short or shrank keeps its last good copy, and says why', async (t) => {
  const { feeds, dataDir, update } = await setUp(t);
  t.equal((await update()).report.result, 'published');
  const proxies = readFileSync(path.join(feedsDir, 'proxy/proxies.txt'), 'utf8').trim().split('\n');

  feeds.route('/tor', { status: 500 });
  feeds.route('/vpn', { hang: true });
  feeds.route('/datacenter', { cut: true, file: path.join(feedsDir, 'datacenter/ipv4.txt') });
  feeds.route('/proxies', { text: `${proxies.slice(0, Math.floor(proxies.length / 10)).join('\n')}\n` }); // 90% gone
  // --force: build even though every copy in use is the same, so the snapshot records what happened.
  const r = await update('--force', '--timeout', '1', '--retries', '1');
  exitedOk(t, r);
  t.equal(r.report.result, 'published');
  const reasons = Object.fromEntries(r.report.sources.map((s: { name: string; status: string; reason: string }) => [s.name, [s.status, s.reason]]));
  t.match(reasons['tor-exits'], ['last_good_copy', /^HTTP 500 Internal Server Error \(2 attempts\)$/]);
  t.match(reasons['vpn-ipv4'], ['last_good_copy', /^no data for 1 s \(timed out\) \(2 attempts\)$/]);
  t.match(reasons['datacenter-ipv4'], ['last_good_copy', /^the download was cut after \d+ of \d+ bytes.* \(2 attempts\)$/]);
  t.match(reasons.proxies, ['last_good_copy', new RegExp(`^the new copy has 49 records, fewer than half of the last good copy's ${proxies.length} `)]);
  t.equal(r.report.fallbacks, 4);
  for (const name of ['tor-exits', 'vpn-ipv4', 'datacenter-ipv4', 'proxies']) {
    t.match(r.stderr, new RegExp(`warning: source ${name}: http://[^ ]+: .*; using the last good copy \\(fetched `), `a warning names ${name}`);
  }
  t.equal((await lookup(dataDir, tor.left)).is_tor, true, 'the Tor answers stand');
  t.equal((await lookup(dataDir, VPN_IP)).is_vpn, true, 'the VPN answers stand');
  t.equal((await lookup(dataDir, DATACENTER_IP)).is_hosting, true, 'the datacenter answers stand');
  t.equal((await lookup(dataDir, PROXY_IP)).is_proxy, true, 'the proxy answers stand');

  const recorded = Object.fromEntries((await info(dataDir)).meta.sources.map((s: Record<string, unknown>) => [s.name, s]));
  t.match(recorded['tor-exits'], { used_last_good_copy: true, http_status: 500, reason: /HTTP 500/, records: tor.current.trim().split('\n').length });
  t.match(recorded['vpn-ipv4'], { used_last_good_copy: true, http_status: null, reason: /timed out/, records: 10862 });
  t.match(recorded['datacenter-ipv4'], { used_last_good_copy: true, http_status: 200, reason: /cut after/, records: 42566 });
  t.match(recorded.proxies, { used_last_good_copy: true, http_status: 200, reason: /fewer than half/, records: proxies.length });

  // A copy that fails the 1% rule (an HTML error page served as 200) is refused too;
  // a shrunken copy is taken when the operator says so.
  feeds.route('/tor', { text: '<html>\n<head><title>Maintenance</title></head>\n<body>back soon</body>\n</html>\n' });
  feeds.route('/vpn', { file: path.join(feedsDir, 'vpn/ipv4.txt') });
  feeds.route('/datacenter', { file: path.join(feedsDir, 'datacenter/ipv4.txt') });
  const next = await update('--accept-shrink', 'proxies');
  exitedOk(t, next);
  const after = Object.fromEntries(next.report.sources.map((s: { name: string; status: string; reason?: string }) => [s.name, [s.status, s.reason]]));
  t.match(after['tor-exits'], ['last_good_copy', /^the new copy is not usable: http:\/\/[^ ]+ has no records \(4 bad lines\)$/]);
  t.same(after['vpn-ipv4'], ['not_modified', undefined]);
  t.same(after.proxies, ['downloaded', undefined], '--accept-shrink takes the smaller list');
  t.equal(next.report.result, 'published');
  t.equal((await lookup(dataDir, PROXY_IP)).is_proxy, proxies.slice(0, 49).some((l) => l.includes(PROXY_IP)));
});

t.test('with no earlier copy to fall back on, the update fails and publishes nothing', async (t) => {
  const { dataDir, update } = await setUp(t, { 'vpn-ipv4': { max_bytes: 100_000 } });
  const r = await update();
  t.equal(r.code, 1);
  t.match(r.stderr, /ipr: source vpn-ipv4: http:\/\/[^ ]+: 178279 bytes, over the limit of 100000; there is no earlier copy to use/);
  t.same(readdirSync(dataDir).includes('snapshots'), false, 'nothing published');
});

t.test('one update at a time in a data folder; a lock left by a dead process is taken over', async (t) => {
  const { feeds, dataDir, update } = await setUp(t);
  feeds.route('/tor', { hang: true });
  const first = update('--timeout', '3', '--retries', '0');
  await sleep(1000); // the first holds the lock, waiting for the Tor list
  const second = await update();
  t.equal(second.code, 1);
  t.match(second.stderr, /^ipr: .*data: another build, update or rollback is running \(pid [0-9]+; .*lock names it\)/);
  t.equal((await first).code, 1, 'the first fails on its own: no earlier copy of the Tor list');
  t.notOk(existsSync(path.join(dataDir, 'lock')), 'the lock is released');

  feeds.route('/tor', { text: tor.current });
  writeFileSync(path.join(dataDir, 'lock'), '2147483646\n'); // no such process
  const after = await update();
  exitedOk(t, after);
  t.equal(after.report.result, 'published');
});

t.test('usage errors of update and of serve\'s update and admin options', async (t) => {
  t.match(await runIpr('update'), { code: 2, stderr: /ipr: update needs --sources FILE/ });
  t.match(await runIpr('update', '--sources', 'x', '--timeout', '0'), { code: 2, stderr: /--timeout takes seconds/ });
  t.match(await runIpr('serve', '--update-interval', '1h'), { code: 2, stderr: /--update-interval and --sources go together/ });
  t.match(await runIpr('serve', '--update-interval', 'hourly', '--sources', 'x'), { code: 2, stderr: /--update-interval takes a duration of at least 1 s/ });
  t.match(await runIpr('serve', '--admin-host', '0.0.0.0'), { code: 2, stderr: /--admin-host and --admin-token-file need --admin-port/ });
});
