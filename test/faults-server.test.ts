// Faults while a server runs: the snapshot it serves written to in place
// (the map is shared with the file), and a kill -9 under load: keys,
// accounts, sessions and usage on restart (test/http-limits.test.ts has the
// quiet case; here requests, sign-ins and key creations are in flight).
import { closeSync, copyFileSync, openSync, readFileSync, renameSync, statSync, writeFileSync, writeSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { random, seededAddresses } from '../bench/addresses.js';
import { openSnapshot } from '../src/index.js';
import { dayOf } from '../src/store/accounts.js';
import { fullDataDir, runIpr } from './helpers.js';
import {
  accountStore,
  accountWithKey,
  admin,
  adminAddress,
  check,
  dash,
  dataDirWithFullSnapshot,
  dataDirWithSnapshotCopy,
  PASSWORD,
  plansFile,
  request,
  samples,
  signIn,
  startServer,
  type Signed,
} from './server.js';

const UNLIMITED: Record<string, [number | null, number]> = { unlimited: [null, 1_000_000_000] };
const DAMAGED_LOG = 'the snapshot being served was changed on disk; still serving it';

function batch(port: number, key: string, ips: string[]) {
  return request(port, '/v1/check/batch', {
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ips }),
  });
}

t.test('a port another process holds: the server says so and exits, leaving no worker thread behind', { timeout: 60_000 }, async (t) => {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  t.teardown(() => holder.close());
  const { port } = holder.address() as net.AddressInfo;
  const run = await runIpr('serve', '--data', dataDirWithFullSnapshot(t), '--host', '127.0.0.1', '--port', String(port), '--workers', '2');
  t.not(run.code, 0);
  t.match(run.stderr, `worker 0: cannot listen on 127.0.0.1:${port}`);
});

t.test('the served snapshot written to in place: no crash, health unchanged, the damage logged once, a new snapshot taken up', async (t) => {
  const dataDir = dataDirWithSnapshotCopy(t);
  const snapshots = path.join(dataDir, 'snapshots');
  const name = readFileSync(path.join(snapshots, 'CURRENT'), 'utf8').trim();
  const file = path.join(snapshots, name);
  const server = await startServer(t, { dataDir, env: { IPR_PLANS_CONFIG: plansFile(t, UNLIMITED) }, args: ['--admin-port', '0'] });
  const store = accountStore(t, dataDir);
  const key = await accountWithKey(store, 'ops@example.com', 'unlimited');
  const reference = openSnapshot(fullDataDir);
  t.teardown(() => reference.close());
  const addresses = seededAddresses(100_000, 61);
  const batches = Array.from({ length: addresses.length / 1000 }, (_, i) => addresses.slice(i * 1000, (i + 1) * 1000));
  const expected = (ips: string[]) => `{"results":[${reference.lookupManyJson(ips).join(',')}]}`;

  const before = await batch(server.port, key, batches[0]!);
  t.equal(before.text, expected(batches[0]!), 'before: the answers of the snapshot');

  // 100,000 single bytes at seeded offsets over the whole file, written in
  // place: the file keeps its size and inode, the server's map sees them.
  const next = random(62);
  const size = statSync(file).size;
  const fd = openSync(file, 'r+');
  for (let i = 0; i < 100_000; i++) writeSync(fd, Buffer.of(next() & 0xff), 0, 1, next() % size);
  closeSync(fd);

  let changed = 0;
  let failed = 0;
  for (const ips of batches) {
    const r = await batch(server.port, key, ips);
    if (r.status === 500) {
      // A record whose offsets now run past the answer buffer: that request fails, the server goes on.
      t.same(r.json, { error: 'internal_error', message: 'Server error', details: {} });
      failed++;
      continue;
    }
    t.equal(r.status, 200);
    t.equal(r.headers['content-type'], 'application/json; charset=utf-8');
    if (r.text !== expected(ips)) changed++;
    const health = await request(server.port, '/v1/health', { method: 'GET' });
    t.same([health.status, health.text], [200, '{"status":"healthy"}'], 'health: a snapshot is loaded and the process serves');
  }
  t.comment(`100 batches of 1,000 addresses after the damage: ${changed} answered differently, ${failed} failed with 500`);
  t.ok(changed + failed > 0, 'the damage reached the answers');
  t.equal(server.process.exitCode, null, 'the server is still running');
  t.notMatch(server.output(), /worker exited/, 'no worker died');

  // Reported by the watch (every 250 ms) for each change it sees, then no more once the file stays as it is.
  const reports = () => server.output().split('\n').filter((l) => l.includes(DAMAGED_LOG));
  const seen = reports().length;
  t.ok(seen >= 1, `logged (${seen} times while the file was being written)`);
  t.match(JSON.parse(reports()[0]!), { level: 50, err: { code: 'snapshot_damaged', message: new RegExp(`${name} was written to while being served`) } });
  await sleep(1000);
  t.equal(reports().length, seen, 'not repeated while the file stays as it is');
  const scrape = await admin(adminAddress(server).port, '/metrics');
  const metrics = samples(scrape.text);
  t.equal(metrics.get('ipr_snapshot_problems_total{problem="damaged"}'), seen, 'counted in the metrics, once per report');
  t.equal(metrics.get('ipr_snapshot_problems_total{problem="refused"}'), 0);

  // Publishing a good snapshot (a fresh copy under a new name) ends it.
  const fresh = name.replace(/-[0-9a-f]{8}\.mdb$/, '-0000beef.mdb');
  copyFileSync(path.join(fullDataDir, 'snapshots', name), path.join(snapshots, fresh));
  writeFileSync(path.join(snapshots, 'CURRENT.tmp'), `${fresh}\n`);
  renameSync(path.join(snapshots, 'CURRENT.tmp'), path.join(snapshots, 'CURRENT'));
  // The watch opens it (checking its 212 MiB) within a second on a quiet machine: allow 20 s on a busy one.
  for (let waited = 0; waited < 20_000 && (await batch(server.port, key, batches[0]!)).text !== expected(batches[0]!); waited += 250) await sleep(250);
  for (const ips of batches.slice(0, 10)) t.equal((await batch(server.port, key, ips)).text, expected(ips), 'the new snapshot answers');
  t.equal(reports().length, seen, 'and nothing more is reported');
});

t.test('kill -9 under load: accounts, keys, sessions and usage intact on restart, at most about a second of counts lost', async (t) => {
  const dataDir = dataDirWithFullSnapshot(t);
  const env = { IPR_PLANS_CONFIG: plansFile(t, { big: [1_000_000, 1_000_000] }) };
  const store = accountStore(t, dataDir);
  const emails = ['a@example.com', 'b@example.com', 'c@example.com', 'd@example.com'];
  const keys = new Map<string, string>();
  for (const email of emails) keys.set(email, await accountWithKey(store, email, 'big'));
  const counted = (email: string) => store.usage(store.listKeys(email)[0]!.id, dayOf(Date.now()));
  const lostCounts: number[] = [];
  const answeredCounts: number[] = [];

  for (let round = 0; round < 2; round++) {
    const baseline = new Map(emails.map((email) => [email, counted(email)]));
    const server = await startServer(t, { dataDir, env });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
    // Every 200 the clients saw, with the time it came.
    const answered = new Map<string, number[]>([...keys.values()].map((key) => [key, []]));
    let killedAt = Infinity;
    const load = async (key: string) => {
      while (Date.now() < killedAt) {
        try {
          const r = await check(server.port, key, { ip: '8.8.8.8' }, { agent });
          if (r.status === 200 && Date.now() < killedAt) answered.get(key)!.push(Date.now());
        } catch {
          return; // the server is gone
        }
      }
    };
    const loads = [...keys.values()].flatMap((key) => Array.from({ length: 8 }, () => load(key)));
    // Dashboard work in flight too: sign-ins and keys made in the dashboard.
    const sessions: [string, Signed][] = [];
    const made: [string, string][] = [];
    const dashboard = (async () => {
      for (const email of emails) {
        try {
          const session = await signIn(server.port, email);
          sessions.push([email, session]);
          const r = await dash(server.port, 'POST', 'keys', session, { name: `made in round ${round}` });
          if (r.status === 201) made.push([email, r.json.key]);
        } catch {
          return;
        }
      }
    })();
    await sleep(1500 + random(round + 90)() % 1000);
    killedAt = Date.now();
    t.equal(await server.stop('SIGKILL'), null, `round ${round}: killed`);
    agent.destroy();
    await Promise.all([...loads, dashboard]);

    const restarted = await startServer(t, { dataDir, env });
    for (const email of emails) {
      const persisted = counted(email);
      const times = answered.get(keys.get(email)!)!;
      const sent = baseline.get(email)! + times.length;
      // Counted can exceed what the clients saw by the requests in flight at the kill (8 per key).
      t.ok(persisted <= sent + 8, `round ${round} ${email}: no more counted than sent`);
      const lost = sent - persisted;
      const lastSeconds = times.filter((at) => at > killedAt - 1500).length;
      t.ok(lost <= lastSeconds, `round ${round} ${email}: ${lost} of ${times.length} answers not counted, within the ${lastSeconds} of the last 1.5 s`);
      lostCounts.push(lost);
      answeredCounts.push(times.length);
      // The limit table continues from what was persisted.
      const r = await check(restarted.port, keys.get(email)!, { ip: '8.8.8.8' });
      t.equal(r.status, 200, `round ${round} ${email}: the key answers after the restart`);
      t.equal(r.headers['x-ratelimit-remaining'], String(1_000_000 - persisted - 1), `round ${round} ${email}: the day continues from the persisted count`);
      t.ok(store.listKeys(email)[0]!.lastUsed, 'last used recorded');
    }
    for (const [email, session] of sessions) {
      const r = await dash(restarted.port, 'GET', 'account', session);
      t.same([r.status, r.json?.email], [200, email], `round ${round}: ${email}'s session signed in before the kill still works`);
    }
    for (const [email, key] of made) t.equal((await check(restarted.port, key, { ip: '8.8.8.8' })).status, 200, `round ${round}: ${email}'s key made in the dashboard before the kill works`);
    for (const email of emails) t.ok(await store.verifyPassword(email, PASSWORD), `round ${round}: ${email}'s password`);
    t.comment(`round ${round}: killed after ${answeredCounts.slice(-4).join('/')} answers per key; ${sessions.length} sessions and ${made.length} dashboard keys made before it`);
    t.equal(await restarted.stop(), 0, 'a graceful stop flushes the counts');
  }
  t.comment(`counts lost per key at a kill -9: ${lostCounts.join(', ')} (of ${answeredCounts.join(', ')} answered)`);
});
