// Faults while a server runs: the snapshot it serves written to in place
// (the map is shared with the file), and a kill -9 under load (keys,
// accounts, sessions and usage on restart).
import { openSync, readFileSync, closeSync, writeFileSync, writeSync, renameSync, copyFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { random, seededAddresses } from '../bench/addresses.js';
import { openSnapshot } from '../src/index.js';
import { fullDataDir } from './helpers.js';
import { accountStore, accountWithKey, dataDirWithSnapshotCopy, plansFile, request, startServer } from './server.js';

const UNLIMITED: Record<string, [number | null, number]> = { unlimited: [null, 1_000_000_000] };
const DAMAGED_LOG = 'the snapshot being served was changed on disk; still serving it';

function batch(port: number, key: string, ips: string[]) {
  return request(port, '/v1/check/batch', {
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ips }),
  });
}

t.test('the served snapshot written to in place: no crash, health unchanged, the damage logged once, a new snapshot taken up', async (t) => {
  const dataDir = dataDirWithSnapshotCopy(t);
  const snapshots = path.join(dataDir, 'snapshots');
  const name = readFileSync(path.join(snapshots, 'CURRENT'), 'utf8').trim();
  const file = path.join(snapshots, name);
  const server = await startServer(t, { dataDir, env: { IPR_PLANS_CONFIG: plansFile(t, UNLIMITED) } });
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

  // Publishing a good snapshot (a fresh copy under a new name) ends it.
  const fresh = name.replace(/-[0-9a-f]{8}\.mdb$/, '-0000beef.mdb');
  copyFileSync(path.join(fullDataDir, 'snapshots', name), path.join(snapshots, fresh));
  writeFileSync(path.join(snapshots, 'CURRENT.tmp'), `${fresh}\n`);
  renameSync(path.join(snapshots, 'CURRENT.tmp'), path.join(snapshots, 'CURRENT'));
  await sleep(1000);
  for (const ips of batches.slice(0, 10)) t.equal((await batch(server.port, key, ips)).text, expected(ips), 'the new snapshot answers');
  t.equal(reports().length, seen, 'and nothing more is reported');
});
