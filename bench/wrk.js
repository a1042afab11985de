// wrk, pinned: what bench:http and bench:cluster share. Servers run on
// core 0 (pin), wrk one thread on core 1, so the load generator never takes
// the server's core; CPU is read from /proc for a process and its children.
import { execFile, execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { cpuSeconds } from './load.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SERVER_CORE = '0';
export const LOAD_CORE = '1';
const run = promisify(execFile);

/** Exits with a message when wrk or taskset is missing, or the machine has one core. */
export function needWrk(name) {
  for (const tool of ['wrk', 'taskset']) {
    try {
      execFileSync(tool, ['--version'], { stdio: 'ignore' });
    } catch (error) {
      if (error.code === 'ENOENT') {
        console.error(`${name} needs ${tool}: apt-get install wrk util-linux`);
        process.exit(1);
      }
    }
  }
  if (os.availableParallelism() < 2) {
    console.error(`${name} needs two cores: one for the servers, one for the load generator`);
    process.exit(1);
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer().once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** A process and its children (the Fastify peer's cluster worker). */
export function tree(pid) {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return [pid, ...children.map(Number)];
}

/** Pins every thread of a process tree to the server core (threads started later inherit it). */
export function pin(pid) {
  for (const p of tree(pid)) execFileSync('taskset', ['-a', '-p', '-c', SERVER_CORE, String(p)], { stdio: 'ignore' });
}

export const treeCpu = (pid) => tree(pid).reduce((sum, p) => sum + cpuSeconds(p), 0);

export async function wrk(port, requestsFile, { seconds, connections, pauseMs = 0 }) {
  const args = ['-c', LOAD_CORE, 'wrk', '-t', '1', '-c', String(connections), '-d', `${seconds}s`, '--timeout', '5s', '-s', path.join(root, 'bench', 'wrk-check.lua')];
  args.push(`http://127.0.0.1:${port}/v1/check`, '--', requestsFile, String(pauseMs));
  const { stdout } = await run('taskset', args, { maxBuffer: 1 << 20 });
  const line = stdout.split('\n').find((l) => l.startsWith('{"requests"'));
  if (!line) throw new Error(`wrk printed no summary:\n${stdout}`);
  const r = JSON.parse(line);
  const failed = Object.values(r.errors).reduce((a, b) => a + b, 0);
  return { ...r, failed, per_second: r.requests / r.seconds };
}

/** The requests wrk sends: "key<TAB>address" lines, key and address rotating independently. */
export function requestsFile(dir, name, keys, addresses) {
  const file = path.join(dir, `${name}.tsv`);
  const lines = Math.max(keys.length, addresses.length);
  writeFileSync(file, Array.from({ length: lines }, (_, i) => `${keys[i % keys.length]}\t${addresses[i % addresses.length]}\n`).join(''));
  return file;
}

