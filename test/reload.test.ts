// Publishing and moving to new snapshots: atomic publish, refresh and watch,
// the old mapping released after its last reader, one mapping shared by
// every worker thread, and a bad new snapshot that leaves the current one
// answering.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import { buildSnapshot, openSnapshot } from '../src/index.js';
import { feeds, root, testDir } from './helpers.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const VPN = { name: 'vpn', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') };
const TOR = { name: 'tor', kind: 'tor', format: 'tor-csv', path: path.join(feeds, 'tor/exits.csv') };
const VPN_IP = '2.26.157.1'; // vpn/ipv4.txt
const TOR_IP = '204.8.96.141'; // tor/exits.csv

async function publishFrom(dataDir: string, sources: object[]): Promise<string> {
  const file = path.join(path.dirname(dataDir), `sources-${Date.now()}-${Math.random()}.json`);
  writeFileSync(file, JSON.stringify({ sources }));
  return (await buildSnapshot({ sources: file, dataDir })).snapshot;
}

/** Snapshot files this process has mapped now. */
function mapped(): string[] {
  return [...new Set(readFileSync('/proc/self/maps', 'utf8').split('\n').filter((l) => l.endsWith('.mdb')).map((l) => l.split(/\s+/).pop()!))];
}

t.test('refresh moves to the newly published snapshot; the old mapping goes with its last reader', async (t) => {
  const dataDir = path.join(testDir(t), 'data');
  const first = await publishFrom(dataDir, [VPN]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  t.equal(s.lookup(VPN_IP).is_vpn, true);
  t.equal(s.info().path, first);

  const second = await publishFrom(dataDir, [TOR]);
  t.equal(s.lookup(VPN_IP).is_vpn, true, 'answers from the old snapshot until told');
  t.equal(await s.refresh(), true, 'moved');
  t.equal(s.lookup(VPN_IP).is_vpn, false);
  t.equal(s.lookup(TOR_IP).is_tor, true);
  t.equal(s.info().path, second);
  t.equal(await s.refresh(), false, 'nothing newer');

  gc();
  await sleep(50); // finalizers of the old record buffers run after a turn
  gc();
  t.same(mapped().filter((f) => f === first), [], 'the old file is unmapped');
  t.same(mapped().filter((f) => f === second), [second], 'the new one is mapped once');
});

t.test('a handle that only watches lets the old snapshot go too', async (t) => {
  // A server's main thread watches but never looks up: it must not keep
  // every snapshot it has seen mapped (and their pruned files on disk).
  const dataDir = path.join(testDir(t), 'data');
  const first = await publishFrom(dataDir, [VPN]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  await publishFrom(dataDir, [TOR]);
  t.equal(await s.refresh(), true, 'moved');
  gc();
  await sleep(50);
  gc();
  t.same(mapped().filter((f) => f === first), [], 'the old file is unmapped without a lookup');
});

t.test('watch: a snapshot published by someone else answers within a second', async (t) => {
  const dataDir = path.join(testDir(t), 'data');
  await publishFrom(dataDir, [VPN]);
  const s = openSnapshot(dataDir, { watch: 100 });
  t.teardown(() => s.close());
  t.equal(s.lookup(TOR_IP).is_tor, false);
  await publishFrom(dataDir, [VPN, TOR]);
  const published = Date.now();
  while (!s.lookup(TOR_IP).is_tor && Date.now() - published < 5000) await sleep(20);
  const waited = Date.now() - published;
  t.ok(waited < 1000, `answered from the new snapshot after ${waited} ms`);
  t.equal(s.lookup(VPN_IP).is_vpn, true);
});

t.test('a corrupt new snapshot is refused and the current one keeps answering', async (t) => {
  const dataDir = path.join(testDir(t), 'data');
  await publishFrom(dataDir, [VPN]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  const next = await publishFrom(dataDir, [TOR]);
  const bytes = readFileSync(next);
  bytes[Math.floor(bytes.length / 2)] ^= 0xff; // inside the tries
  writeFileSync(next, bytes);
  await t.rejects(s.refresh(), { code: 'snapshot_invalid', message: new RegExp(`${path.basename(next)}: checksum mismatch`) });
  t.equal(s.lookup(VPN_IP).is_vpn, true, 'still answering from the previous snapshot');
  t.equal(await s.refresh(), false, 'the bad file is not retried');
  await publishFrom(dataDir, [TOR]);
  t.equal(await s.refresh(), true, 'a good one after it is taken');
  t.equal(s.lookup(TOR_IP).is_tor, true);
});

t.test('worker threads share one mapping and move together', async (t) => {
  const dataDir = path.join(testDir(t), 'data');
  await publishFrom(dataDir, [VPN]);
  const main = openSnapshot(dataDir);
  t.teardown(() => main.close());
  // Each worker opens the same folder and answers lookups sent to it.
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    import(workerData.module).then(({ openSnapshot }) => {
      const s = openSnapshot(workerData.dataDir);
      parentPort.on('message', async (m) => {
        if (m.refresh) await s.refresh();
        parentPort.postMessage(s.lookupMany(m.ips).map((r) => [r.is_vpn, r.is_tor]));
        if (m.close) { s.close(); parentPort.close(); }
      });
      parentPort.postMessage('ready');
    });`;
  const module = pathToFileURL(path.join(root, 'dist', 'index.js')).href;
  const workers = [0, 1].map(() => new Worker(code, { eval: true, workerData: { module, dataDir } }));
  // Listen for the exits now: one worker may end before the other has answered.
  const exited = Promise.all(workers.map((w) => new Promise((resolve) => w.once('exit', resolve))));
  const ask = (w: Worker, m: object) => new Promise<unknown>((resolve) => w.once('message', resolve));
  await Promise.all(workers.map((w) => ask(w, {})));
  const asked = (m: object) => Promise.all(workers.map((w) => { const p = ask(w, m); w.postMessage(m); return p; }));

  t.same(await asked({ ips: [VPN_IP, TOR_IP] }), [[[true, false], [false, false]], [[true, false], [false, false]]]);
  const files = mapped();
  t.equal(files.length, 1, `three threads, one mapping: ${files.join(', ')}`);

  await publishFrom(dataDir, [TOR]);
  t.same(await asked({ ips: [VPN_IP, TOR_IP], refresh: true }), [[[false, false], [false, true]], [[false, false], [false, true]]]);
  t.equal(main.lookup(TOR_IP).is_tor, true, 'the main thread sees the swap another thread made');
  await asked({ ips: [], close: true });
  await exited;
});
