// Faults during `ipr build`: kill -9 at random points of the build and of its
// publication, and a full disk (a small tmpfs): the previous snapshot stays
// published, intact and served, the error says what happened, and nothing
// the failed build wrote is left to fill the disk.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { random, seededAddresses } from '../bench/addresses.js';
import { openSnapshot } from '../src/index.js';
import { cli, root, testDir } from './helpers.js';
import { accountStore, accountWithKey, plansFile, request, startServer, type Server } from './server.js';

/** Kill trials in CI; IPR_FAULT_TRIALS runs more by hand. */
const TRIALS = Number(process.env.IPR_FAULT_TRIALS ?? 8);
const SNAPSHOT = /^snap-[0-9]{8}T[0-9]{9}Z-[0-9a-f]{8}\.mdb$/;

/**
 * The shipped test sources without the geolocation databases: a real
 * build (every feed, the ASN ranges) of about 28 MiB in about 2.5 s, so that
 * many builds can be killed in a test's time.
 */
function sourcesWithoutGeo(t: Parameters<typeof testDir>[0]): string {
  const shipped = path.join(root, 'sources', 'feeds.sources.json');
  const config = JSON.parse(readFileSync(shipped, 'utf8')) as { sources: { kind: string; path?: string }[] };
  const sources = config.sources
    .filter((s) => s.kind !== 'geo')
    .map((s) => (s.path === undefined ? s : { ...s, path: path.resolve(path.dirname(shipped), s.path) }));
  const file = path.join(testDir(t), 'no-geo.sources.json');
  writeFileSync(file, JSON.stringify({ sources }));
  return file;
}

function ipr(...args: string[]) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function published(dataDir: string): string {
  return readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim();
}

/**
 * The files of `dataDir` named like snapshots that do not open as one (each
 * is checked whole, in a folder of its own whose CURRENT names it): an
 * operator must be able to publish any of them again.
 */
function brokenSnapshots(t: Parameters<typeof testDir>[0], dataDir: string): string[] {
  const broken: string[] = [];
  for (const name of readdirSync(path.join(dataDir, 'snapshots')).filter((f) => SNAPSHOT.test(f))) {
    const probe = path.join(testDir(t), 'probe', name);
    mkdirSync(path.join(probe, 'snapshots'), { recursive: true });
    rmSync(path.join(probe, 'snapshots', name), { force: true });
    symlinkSync(path.join(dataDir, 'snapshots', name), path.join(probe, 'snapshots', name));
    writeFileSync(path.join(probe, 'snapshots', 'CURRENT'), `${name}\n`);
    try {
      openSnapshot(probe).close();
    } catch {
      broken.push(name);
    }
  }
  return broken;
}

/** A server whose snapshots folder is `dataDir`'s (its accounts live elsewhere), with an unlimited key. */
async function serverOn(t: Parameters<typeof testDir>[0], dataDir: string): Promise<{ server: Server; key: string }> {
  const serverDir = path.join(testDir(t), 'server');
  mkdirSync(serverDir, { recursive: true });
  symlinkSync(path.join(dataDir, 'snapshots'), path.join(serverDir, 'snapshots'));
  const server = await startServer(t, { dataDir: serverDir, env: { IPR_PLANS_CONFIG: plansFile(t, { unlimited: [null, 1_000_000_000] }) } });
  const key = await accountWithKey(accountStore(t, serverDir), 'ops@example.com', 'unlimited');
  return { server, key };
}

/** Answers of `ips` from the server, as one batch. */
async function served(server: Server, key: string, ips: string[]): Promise<string> {
  const r = await request(server.port, '/v1/check/batch', {
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ips }),
  });
  return `${r.status} ${r.text}`;
}

t.test('kill -9 of ipr build at random points: the previous snapshot stays published, intact and served', async (t) => {
  const sources = sourcesWithoutGeo(t);
  const dataDir = path.join(testDir(t), 'data');
  const started = Date.now();
  const first = ipr('build', '--sources', sources, '--data', dataDir, '--keep', '1');
  const buildMs = Date.now() - started;
  t.equal(first.code, 0, first.stderr);
  const ips = seededAddresses(1000, 71);
  const reference = openSnapshot(dataDir);
  const expected = `200 {"results":[${reference.lookupManyJson(ips).join(',')}]}`;
  reference.close();
  const { server, key } = await serverOn(t, dataDir);
  t.equal(await served(server, key, ips), expected);

  // Half the kills at any time of the build, half once it says it is writing
  // (the write, the rename and the publication take the last 100 ms or so).
  const next = random(72);
  const outcomes = { importing: 0, writing: 0, published: 0, finished: 0 };
  for (let trial = 0; trial < TRIALS; trial++) {
    const before = published(dataDir);
    const child = spawn(process.execPath, [cli, 'build', '--sources', sources, '--data', dataDir, '--keep', '1'], { stdio: ['ignore', 'ignore', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    let stderr = '';
    const writing = new Promise<void>((resolve) =>
      child.stderr!.on('data', (d) => {
        stderr += d;
        if (stderr.includes('writing snapshot...')) resolve();
      }),
    );
    const delay = trial % 2 === 0 ? next() % buildMs : null;
    if (delay === null) await Promise.race([writing, exited]);
    await sleep(delay ?? next() % 150);
    child.kill('SIGKILL');
    const code = await exited;
    const after = published(dataDir);
    t.match(after, SNAPSHOT, `trial ${trial}: CURRENT names a snapshot`);
    if (code === 0) outcomes.finished++; // the build ended before the kill
    else if (after !== before) outcomes.published++;
    else if (stderr.includes('writing snapshot...')) outcomes.writing++;
    else outcomes.importing++;
    // CURRENT always names a whole snapshot: it opens (every byte checked) and answers as before.
    const snapshot = openSnapshot(dataDir);
    t.equal(`200 {"results":[${snapshot.lookupManyJson(ips).join(',')}]}`, expected, `trial ${trial}: the published snapshot is intact`);
    snapshot.close();
    t.same(brokenSnapshots(t, dataDir), [], `trial ${trial}: no partial file is named like a snapshot`);
    t.equal(await served(server, key, ips), expected, `trial ${trial}: the server answers as before`);
  }
  t.comment(
    `${TRIALS} kills (a build takes ${buildMs} ms): ${outcomes.importing} while importing, ${outcomes.writing} while writing ` +
      `or publishing, ${outcomes.published} once published, ${outcomes.finished} too late (the build had ended)`,
  );
  t.ok(outcomes.importing + outcomes.writing > 0, 'some builds were killed before they published');
  t.equal(server.process.exitCode, null, 'the server ran throughout');

  // What the killed builds left is named after them, and the next build removes it.
  const last = ipr('build', '--sources', sources, '--data', dataDir, '--keep', '1');
  t.equal(last.code, 0, last.stderr);
  const files = readdirSync(path.join(dataDir, 'snapshots')).sort();
  t.same(files.filter((f) => !SNAPSHOT.test(f)), ['CURRENT'], `only snapshots and CURRENT are left: ${files.join(', ')}`);
  t.ok(files.length <= 3, 'the published snapshot and at most one older one');
  t.same(brokenSnapshots(t, dataDir), [], 'every snapshot kept is whole');
  t.notMatch(last.stderr, /\n\s+at /, 'no stack trace');
});

/**
 * Mounts a tmpfs of `options` on a new folder, unmounted at the end of the
 * test (when given one). Not inside the test's folder: tap removes that
 * before later teardowns run, and a mount point cannot be removed.
 */
function tmpfs(t: Parameters<typeof testDir>[0] | null, options: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ipr-disk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (error) {
    rmdirSync(dir);
    throw error;
  }
  const unmount = () => {
    // Lazily: the server of the test may still have the snapshot mapped.
    execFileSync('umount', ['-l', dir]);
    rmdirSync(dir);
  };
  if (t === null) unmount();
  else t.teardown(unmount);
  return dir;
}

/** Why a full disk cannot be tried here, or false when it can (mounting needs root or CAP_SYS_ADMIN). */
const cannotMount = (() => {
  try {
    tmpfs(null, 'size=1m');
    return false;
  } catch (error) {
    return `mount -t tmpfs is not allowed here (${(error as Error).message.split('\n')[0]}): run as root to try a full disk`;
  }
})();

t.test('a full disk during a build: a clear error, the old snapshot kept and served, nothing left behind', { skip: cannotMount }, async (t) => {
  const sources = sourcesWithoutGeo(t);
  // Room for one snapshot of about 28 MiB and not for a second.
  const disk = tmpfs(t, 'size=48m');
  const dataDir = path.join(disk, 'data');
  t.equal(ipr('build', '--sources', sources, '--data', dataDir).code, 0, 'the first build fits');
  const old = published(dataDir);
  const ips = seededAddresses(1000, 73);
  const reference = openSnapshot(dataDir);
  const expected = `200 {"results":[${reference.lookupManyJson(ips).join(',')}]}`;
  reference.close();
  const { server, key } = await serverOn(t, dataDir);

  const full = ipr('build', '--sources', sources, '--data', dataDir);
  t.equal(full.code, 1, 'exit code 1: an operator error');
  t.match(full.stderr, /ipr: snapshot .*: not written \(no space left on device: the snapshot needs [0-9.]+ MiB and the file system has [0-9.]+ MiB free\)\n$/);
  t.notMatch(full.stderr, /\n\s+at /, 'no stack trace');
  t.equal(published(dataDir), old, 'the old snapshot stays published');
  t.same(readdirSync(path.join(dataDir, 'snapshots')).sort(), ['CURRENT', old], 'nothing of the failed build is left');
  t.equal(await served(server, key, ips), expected, 'and served');
});

t.test('no room for CURRENT at publication (no inode left): a clear error, the old snapshot kept, the new file removed', { skip: cannotMount }, async (t) => {
  const sources = sourcesWithoutGeo(t);
  const disk = tmpfs(t, 'size=128m,nr_inodes=64');
  const dataDir = path.join(disk, 'data');
  t.equal(ipr('build', '--sources', sources, '--data', dataDir).code, 0);
  const old = published(dataDir);
  // Use up every inode, then free two: the data folder's lock and the new
  // snapshot file can be created, CURRENT's replacement cannot.
  const filler = path.join(disk, 'filler');
  mkdirSync(filler);
  let files = 0;
  try {
    for (;;) writeFileSync(path.join(filler, String(files++)), '');
  } catch (error) {
    t.equal((error as NodeJS.ErrnoException).code, 'ENOSPC', `inodes used up after ${files - 1} files`);
  }
  rmSync(path.join(filler, '0'));
  rmSync(path.join(filler, '1'));

  const r = ipr('build', '--sources', sources, '--data', dataDir);
  t.equal(r.code, 1);
  t.match(r.stderr, new RegExp(`ipr: snapshot .*: publishing failed: ENOSPC: no space left on device.*; ${old.replace(/\./g, '\\.')} stays published\\n$`));
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
  t.equal(published(dataDir), old);
  t.same(readdirSync(path.join(dataDir, 'snapshots')).sort(), ['CURRENT', old], 'the unpublished snapshot and the temporary file are removed');
  const snapshot = openSnapshot(dataDir);
  t.equal(snapshot.info().path, path.join(dataDir, 'snapshots', old));
  snapshot.close();
});
