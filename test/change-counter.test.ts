// The account store's change counter (native/src/change_counter.h): one
// mapped page that every process and thread opening the same store shares.
// A change committed anywhere moves it, and nothing else does.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import t from 'tap';
import { AccountStore } from '../src/store/accounts.js';
import { cli, testDir } from './helpers.js';

const ipr = (dataDir: string, args: string[], input?: string) => spawnSync(process.execPath, [cli, ...args, '--data', dataDir], { encoding: 'utf8', input });

t.test('every change that can alter an answer moves the counter, from another process too', async (t) => {
  const dataDir = testDir(t);
  const store = new AccountStore(dataDir);
  t.teardown(() => store.close());
  t.equal(statSync(path.join(dataDir, 'accounts', 'changes')).size, 4096, 'one page, beside the store');

  let seen = store.changeCount();
  const moved = (what: string) => {
    const now = store.changeCount();
    t.not(now, seen, `${what} moves it`);
    seen = now;
  };
  t.equal(ipr(dataDir, ['accounts', 'create', '--email', 'a@example.com', '--plan', 'pro'], 'a password of 10+').status, 0);
  t.equal(store.changeCount(), seen, 'a new account alters no answer');
  const created = ipr(dataDir, ['keys', 'create', '--account', 'a@example.com', '--name', 'one']);
  moved('a key made by the CLI');
  const prefix = created.stdout.trim().slice(0, 8);
  ipr(dataDir, ['keys', 'allow', '--account', 'a@example.com', '--prefix', prefix, '--from', '203.0.113.0/24']);
  moved('allowed addresses');
  ipr(dataDir, ['accounts', 'set-plan', '--email', 'a@example.com', '--plan', 'free']);
  moved('a plan');
  ipr(dataDir, ['accounts', 'suspend', '--email', 'a@example.com']);
  moved('a suspension');
  store.revokeKey('a@example.com', prefix);
  moved('a revocation in this process');
  store.recordUsage([{ id: 0, day: '2026-01-01', requests: 5 }], []);
  t.equal(store.changeCount(), seen, 'usage alters no answer');
});

t.test('worker threads see the same counter', async (t) => {
  const dataDir = testDir(t);
  const store = new AccountStore(dataDir);
  t.teardown(() => store.close());
  const before = store.changeCount();
  const code = `
    import { workerData, parentPort } from 'node:worker_threads';
    const { native } = await import(workerData.native);
    const counter = native.mapChangeCounter(workerData.file);
    native.bumpChangeCounter(counter);
    parentPort.postMessage(new Uint32Array(counter)[0]);`;
  const native = new URL('../dist/native.js', import.meta.url).href;
  const worker = new Worker(code, { eval: true, workerData: { native, file: path.join(dataDir, 'accounts', 'changes') } });
  const inWorker = await new Promise((resolve) => worker.once('message', resolve));
  t.equal(inWorker, before + 1);
  t.equal(store.changeCount(), before + 1, 'the bump is seen at once');
});

t.test('a store folder removed and made again under the same name is a new counter', async (t) => {
  const dataDir = testDir(t);
  const first = new AccountStore(dataDir);
  await first.close();
  rmSync(path.join(dataDir, 'accounts'), { recursive: true });
  mkdirSync(path.join(dataDir, 'accounts'));
  // Another process bumps the new file; this one must read that file, not its old mapping.
  t.equal(ipr(dataDir, ['accounts', 'create', '--email', 'b@example.com', '--plan', 'pro'], 'a password of 10+').status, 0);
  t.equal(ipr(dataDir, ['keys', 'create', '--account', 'b@example.com', '--name', 'k']).status, 0);
  const again = new AccountStore(dataDir);
  t.teardown(() => again.close());
  t.equal(again.changeCount(), 1, 'the new file, bumped once by the other process');
});
