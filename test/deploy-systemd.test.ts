// The deployment kit's systemd units (deploy/systemd): what systemd itself
// says of them, without running as PID 1 (which it cannot here: the
// machine's PID 1 is its sandbox's process manager): `systemd-analyze
// verify` (every directive known, the programs they start present, the
// timer's service found), `systemd-analyze security --offline` (the
// hardening), `systemd-analyze calendar` (when the timer fires). Then the
// closest thing to systemd starting them: their ExecStart lines and
// Environment, exactly as written but for the install paths and ports
// (mapped into the test's folder), run as the services would run them:
// the update publishes a snapshot from the feeds, and the server answers on
// its port, serves metrics on its admin port, writes its access log, and
// stops on the unit's KillSignal within its TimeoutStopSec.
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { startFeedServer } from '../bench/feed-server.js';
import { feeds as sharedFeeds, root, testDir } from './helpers.js';
import { freePort } from './nginx.js';
import { admin, check, request } from './server.js';

const run = promisify(execFile);
const units = path.join(root, 'deploy', 'systemd');
const UNITS = ['ipr.service', 'ipr-update.service', 'ipr-update.timer'];

function analyze(...args: string[]) {
  const r = spawnSync('systemd-analyze', args, { encoding: 'utf8', cwd: units });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The values of `key` in a unit file (continuation lines joined). */
function directive(unit: string, key: string): string[] {
  const text = readFileSync(path.join(units, unit), 'utf8').replace(/\\\n/g, ' ');
  return [...text.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]!.trim());
}

/** ExecStart split into words, and Environment as variables (the units use no quoting). */
function command(unit: string): { argv: string[]; env: Record<string, string> } {
  const [exec] = directive(unit, 'ExecStart');
  const env = Object.fromEntries(directive(unit, 'Environment').flatMap((line) => line.split(/\s+/).map((pair) => pair.split('=') as [string, string])));
  return { argv: exec!.split(/\s+/), env };
}

t.test('systemd-analyze verify: every directive known, the programs and the timer\'s service found', async (t) => {
  const r = analyze('verify', '--man=no', ...UNITS.map((u) => `./${u}`));
  t.equal(r.code, 0, 'systemd-analyze verify exits 0');
  t.equal(`${r.stdout}${r.stderr}`, '', 'and has nothing to say');
  t.same([command('ipr.service').argv[0], command('ipr-update.service').argv[0]], ['/usr/bin/node', '/usr/bin/node'], "Debian's node, which verify found");
});

t.test('systemd-analyze security: both services expose at most 3.0 (of 10)', async (t) => {
  for (const unit of ['ipr.service', 'ipr-update.service']) {
    const r = analyze('security', '--offline=true', '--threshold=30', '--no-pager', `./${unit}`);
    t.equal(r.code, 0, `${unit}: ${/Overall exposure level for \S+: ([0-9.]+)/.exec(r.stdout)?.[1]}`);
  }
});

t.test('the timer fires every hour, spread over ten minutes, and catches up after downtime', async (t) => {
  t.same(directive('ipr-update.timer', 'OnCalendar'), ['hourly']);
  const r = analyze('calendar', '--iterations=2', 'hourly');
  t.equal(r.code, 0);
  t.match(r.stdout, /Normalized form: \*-\*-\* \*:00:00/);
  t.same(directive('ipr-update.timer', 'RandomizedDelaySec'), ['10min']);
  t.same(directive('ipr-update.timer', 'Persistent'), ['true']);
});

t.test("the units' commands, as written, update the data and serve it", async (t) => {
  const dir = testDir(t);
  const state = path.join(dir, 'var-lib-ipr');
  const logs = path.join(dir, 'var-log-ipr');
  const ports = { api: await freePort(), admin: await freePort() };
  // The upstream feeds cannot be reached from here: the shipped sources file
  // is replaced by one whose feed is served locally (bench/feed-server.js).
  const feeds = await startFeedServer();
  t.teardown(() => feeds.close());
  feeds.route('/tor', { file: path.join(sharedFeeds, 'tor', 'exits.csv') });
  const sources = path.join(dir, 'sources.json');
  writeFileSync(sources, JSON.stringify({ sources: [{ name: 'tor-exits', kind: 'tor', format: 'tor-csv', url: feeds.url('/tor'), license: 'MIT' }] }));
  // What an install puts where the units look: the program, the data folder, the log folder (StateDirectory, LogsDirectory).
  const mapped = (arg: string) => {
    if (arg === '/opt/ip-reputation/sources/default.sources.json') return sources;
    return arg
      .replace(/^\/opt\/ip-reputation\//, `${root}/`)
      .replace(/^\/var\/lib\/ipr(?=\/|$)/, state)
      .replace(/^\/var\/log\/ipr(?=\/|$)/, logs);
  };
  t.same(directive('ipr.service', 'StateDirectory'), ['ipr']);
  t.same(directive('ipr.service', 'LogsDirectory'), ['ipr']);
  mkdirSync(state);
  mkdirSync(logs);

  // Not spawnSync: the feed server in this process has to answer it.
  const update = command('ipr-update.service');
  const ran = await run(update.argv[0]!, update.argv.slice(1).map(mapped), { env: { ...process.env, ...update.env } });
  t.match(JSON.parse(ran.stdout.trim().split('\n').pop()!), { result: 'published' }, 'ipr update exits 0 with one JSON line: a snapshot published');

  const serve = command('ipr.service');
  const argv = serve.argv.slice(1).map(mapped);
  const portAt = argv.indexOf('--port');
  const adminAt = argv.indexOf('--admin-port');
  t.same([argv[portAt + 1], argv[adminAt + 1]], ['8080', '9464'], 'the ports ipr.conf and the Prometheus scrape expect');
  argv[portAt + 1] = String(ports.api);
  argv[adminAt + 1] = String(ports.admin);
  const child = spawn(serve.argv[0]!, argv, { env: { ...process.env, ...serve.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  t.teardown(() => child.kill('SIGKILL'));
  for (let i = 0; i < 300 && !/serving http/.test(output); i++) await new Promise((resolve) => setTimeout(resolve, 100));
  t.match(output, new RegExp(`serving http://127\\.0\\.0\\.1:${ports.api}/v1`), 'ipr serve listens on loopback only');

  t.equal((await request(ports.api, '/v1/health', { method: 'GET' })).status, 200, 'healthy');
  t.equal((await check(ports.api, null, { ip: '8.8.8.8' })).status, 401);
  const metrics = await admin(ports.admin, '/metrics');
  t.match(metrics.text, /ipr_snapshot_age_seconds [0-9.]+/, 'metrics on the admin port');
  for (let i = 0; i < 30 && !existsSync(path.join(logs, 'access.log')); i++) await new Promise((resolve) => setTimeout(resolve, 100));
  await new Promise((resolve) => setTimeout(resolve, 1200));
  t.match(readFileSync(path.join(logs, 'access.log'), 'utf8'), /"route":"\/v1\/check","status":401/, 'the access log in the logs directory');

  t.same(directive('ipr.service', 'KillSignal'), ['SIGTERM']);
  const stopAfter = Number(/^([0-9]+)$/.exec(directive('ipr.service', 'TimeoutStopSec')[0]!)![1]);
  const stopping = Date.now();
  child.kill('SIGTERM');
  t.equal(await exited, 0, 'exits 0 on the unit\'s KillSignal');
  t.ok(Date.now() - stopping < stopAfter * 1000, `within TimeoutStopSec (${stopAfter} s)`);
});
