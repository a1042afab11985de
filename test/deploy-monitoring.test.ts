// The deployment kit's monitoring: the Prometheus alert rules pass
// `promtool check rules` and their unit tests (`promtool test rules`); the
// Grafana dashboard's queries are valid PromQL to promtool too; and every
// metric and label the rules and the dashboard ask for is one a real
// `ipr serve` exports on its admin port (the shared store's, by a node on a
// real redis-server). (Grafana itself is not packaged for
// Debian: the dashboard is checked as data.)
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { startFeedServer } from '../bench/feed-server.js';
import { feeds as sharedFeeds, root, runIpr, testDir } from './helpers.js';
import { startRedis } from './redis.js';
import { accountStore, accountWithKey, admin, adminAddress, check, dataDirWithFullSnapshot, request, startServer } from './server.js';

const prometheus = path.join(root, 'deploy', 'prometheus');
const dashboard = JSON.parse(readFileSync(path.join(root, 'deploy', 'grafana', 'ipr-dashboard.json'), 'utf8'));

function promtool(...args: string[]) {
  const r = spawnSync('promtool', args, { encoding: 'utf8', cwd: prometheus });
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

/** The alert rules' expressions, read from the YAML as promtool reads it (the `expr:` lines and their blocks). */
function ruleExpressions(): string[] {
  const lines = readFileSync(path.join(prometheus, 'ipr-alerts.yml'), 'utf8').split('\n');
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)expr: (.*)$/.exec(lines[i]!);
    if (!m) continue;
    if (m[2] !== '|') {
      out.push(m[2]!);
      continue;
    }
    const block: string[] = [];
    while (i + 1 < lines.length && (lines[i + 1]!.trim() === '' || lines[i + 1]!.search(/\S/) > m[1]!.length)) block.push(lines[++i]!.trim());
    out.push(block.join(' ').trim());
  }
  return out;
}

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { uid: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: { expr: string; datasource: { uid: string } }[];
}

/** The dashboard's queries with Grafana's variables as Prometheus would see them. */
function dashboardExpressions(): string[] {
  return (dashboard.panels as Panel[]).flatMap((p) =>
    (p.targets ?? []).map((q) => q.expr.replace(/\$__rate_interval/g, '5m').replace(/\$__range/g, '6h').replace(/\$job/g, 'ipr').replace(/\$instance/g, '.*')),
  );
}

/** Metric names and label names a PromQL expression uses (the subset these files use). */
function selectors(expr: string): { metrics: Set<string>; labels: Map<string, Set<string>> } {
  const metrics = new Set<string>();
  const labels = new Map<string, Set<string>>();
  const grouped = new Set<string>();
  let rest = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  rest = rest.replace(/\b(?:by|without)\s*\(([^)]*)\)/g, (_, names: string) => {
    for (const n of names.split(',')) if (n.trim()) grouped.add(n.trim());
    return ' ';
  });
  rest = rest.replace(/\[[^\]]*\]/g, ' ');
  for (const m of rest.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{([^}]*)\})?\s*(\()?/g)) {
    const [, name, , matchers, call] = m;
    if (call || ['and', 'or', 'unless', 'bool', 'offset'].includes(name!)) continue;
    metrics.add(name!);
    const used = labels.get(name!) ?? new Set<string>();
    for (const pair of (matchers ?? '').split(',')) if (pair.trim()) used.add(pair.split(/[=!~]/)[0]!.trim());
    for (const g of grouped) used.add(g);
    labels.set(name!, used);
  }
  return { metrics, labels };
}

t.test('the alert rules pass promtool check rules and their unit tests', async (t) => {
  const checked = promtool('check', 'rules', 'ipr-alerts.yml');
  t.equal(checked.code, 0, 'promtool check rules exits 0');
  t.match(checked.output, /SUCCESS: 12 rules found/);
  const tested = promtool('test', 'rules', 'ipr-alerts.test.yml');
  t.equal(tested.code, 0, 'promtool test rules exits 0');
  t.match(tested.output, /SUCCESS/);
});

t.test("the dashboard's queries are valid PromQL, and its panels are laid out on Grafana's grid", async (t) => {
  const expressions = dashboardExpressions();
  t.ok(expressions.length >= 20, `${expressions.length} queries`);
  const rules = `groups:\n  - name: dashboard\n    rules:\n${expressions.map((e, i) => `      - record: dashboard:query${i}\n        expr: ${JSON.stringify(e)}\n`).join('')}`;
  writeFileSync(path.join(testDir(t), 'dashboard-queries.yml'), rules);
  const checked = spawnSync('promtool', ['check', 'rules', path.join(testDir(t), 'dashboard-queries.yml')], { encoding: 'utf8' });
  t.equal(checked.status, 0, 'promtool parses every query');
  t.match(checked.stdout, new RegExp(`SUCCESS: ${expressions.length} rules found`), checked.stderr);

  const panels = dashboard.panels as Panel[];
  t.equal(new Set(panels.map((p) => p.id)).size, panels.length, 'panel ids are unique');
  const problems: string[] = [];
  const cells = new Set<string>();
  for (const p of panels) {
    const { x, y, w, h } = p.gridPos;
    if (!(x >= 0 && w > 0 && x + w <= 24)) problems.push(`${p.title}: outside the 24 columns`);
    for (let i = x; i < x + w; i++) {
      for (let j = y; j < y + h; j++) {
        if (cells.has(`${i},${j}`)) problems.push(`${p.title}: overlaps another panel at ${i},${j}`);
        cells.add(`${i},${j}`);
      }
    }
    const sources = p.type === 'row' ? [] : [p.datasource?.uid, ...(p.targets ?? []).map((q) => q.datasource.uid)];
    if (sources.some((uid) => uid !== '${datasource}')) problems.push(`${p.title}: not on the chosen Prometheus`);
  }
  t.same(problems, [], 'panels inside the grid, apart, on the datasource variable');
});

t.test('every metric and label they ask for is one a real ipr serve exports', async (t) => {
  // A snapshot with a downloaded source (the feed server stands in for its
  // upstream), so that the per-source series exist too.
  const feeds = await startFeedServer();
  t.teardown(() => feeds.close());
  feeds.route('/tor', { file: path.join(sharedFeeds, 'tor', 'exits.csv') });
  const sources = path.join(testDir(t), 'sources.json');
  writeFileSync(sources, JSON.stringify({ sources: [{ name: 'tor-exits', kind: 'tor', format: 'tor-csv', url: feeds.url('/tor'), license: 'MIT' }] }));
  const dataDir = path.join(testDir(t), 'data');
  const updated = await runIpr('update', '--sources', sources, '--data', dataDir, '--json');
  t.match(JSON.parse(updated.stdout), { result: 'published' }, 'ipr update published a snapshot');
  const server = await startServer(t, { dataDir, args: ['--admin-port', '0'] });
  const key = await accountWithKey(accountStore(t, server.dataDir), 'ops@example.com', 'free');
  // Traffic, so that the labelled series exist: answers of several routes and statuses, and a refusal.
  await check(server.port, key, { ip: '8.8.8.8' });
  await check(server.port, key, { ip: '8.8.8.8' });
  await check(server.port, null, { ip: '8.8.8.8' });
  await request(server.port, '/v1/check/batch', { headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: '{"ips":["1.1.1.1"]}' });
  // A node serving the customers of a shared store exports the store's metrics too.
  const redis = await startRedis(t);
  const node = await startServer(t, { dataDir: dataDirWithFullSnapshot(t, 'node'), workers: 1, args: ['--admin-port', '0', '--store', redis.url] });
  const scrape = (await admin(adminAddress(server).port, '/metrics')).text + (await admin(adminAddress(node).port, '/metrics')).text;
  const families = new Map<string, string>();
  for (const m of scrape.matchAll(/^# TYPE (\S+) (\S+)$/gm)) families.set(m[1]!, m[2]!);
  const sampleLabels = new Map<string, Set<string>>();
  for (const m of scrape.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}/gm)) {
    const set = sampleLabels.get(m[1]!) ?? new Set<string>();
    for (const pair of m[2]!.split(',')) set.add(pair.split('=')[0]!);
    sampleLabels.set(m[1]!, set);
  }
  /** The family a series name belongs to: itself, or a histogram's with its _bucket, _sum or _count. */
  const familyOf = (name: string) => {
    if (families.has(name)) return name;
    const base = name.replace(/_(bucket|sum|count)$/, '');
    return families.get(base) === 'histogram' ? base : null;
  };
  // Labels every scraped series gets from Prometheus, and `le` of histogram buckets.
  const targetLabels = new Set(['job', 'instance']);

  const asked = [...ruleExpressions().map((e) => ['ipr-alerts.yml', e]), ...dashboardExpressions().map((e) => ['ipr-dashboard.json', e])];
  t.equal(ruleExpressions().length, 12, 'every rule expression is read');
  const problems: string[] = [];
  const shown = new Set<string>();
  for (const [file, expr] of asked) {
    const { metrics, labels } = selectors(expr!);
    for (const metric of metrics) {
      if (metric === 'up') continue; // made by Prometheus for each scrape
      const family = familyOf(metric);
      if (family === null) {
        problems.push(`${file}: ${metric} is not exported`);
        continue;
      }
      shown.add(family);
      const known = sampleLabels.get(metric) ?? new Set<string>();
      for (const label of labels.get(metric)!) if (!targetLabels.has(label) && !known.has(label)) problems.push(`${file}: ${metric} has no label ${label}`);
    }
  }
  t.same(problems, [], 'every metric asked for is exported, with the labels asked for');
  // The build and last-success times are shown as the snapshot's age, and alerted on through it.
  const unshown = [...families.keys()].filter((f) => f.startsWith('ipr_') && !shown.has(f));
  t.same(unshown.sort(), ['ipr_snapshot_build_timestamp_seconds', 'ipr_update_last_success_timestamp_seconds'], 'every other ipr_ metric is on the dashboard or in an alert');
});
