// The deployment kit's logrotate configuration (deploy/logrotate/ipr): what
// `logrotate -d` reads in it, then a real rotation by logrotate of the
// access log a running `ipr serve` writes (the path mapped into the test's
// folder): the lines before it are in the rotated file, the server goes on
// writing into the truncated one from its start (copytruncate, no restart,
// no signal), and no line is cut or padded.
import { execFile, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { root, testDir } from './helpers.js';
import { check, startServer } from './server.js';

const config = path.join(root, 'deploy', 'logrotate', 'ipr');
const run = promisify(execFile);

/** The access log's lines once the server has flushed them (it writes every second), as objects. */
async function settledLines(file: string, count: number): Promise<{ status: number; client: string }[]> {
  for (let i = 0; i < 50; i++) {
    const text = readFileSync(file, 'utf8');
    if (text.split('\n').length - 1 >= count) return text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

t.test('logrotate -d reads the configuration as meant', async (t) => {
  const r = spawnSync('logrotate', ['-d', '-s', path.join(testDir(t), 'state'), config], { encoding: 'utf8' });
  t.equal(r.status, 0, 'logrotate -d exits 0');
  t.match(r.stderr, /rotating pattern: \/var\/log\/ipr\/access\.log\s+after 1 days \(14 rotations\)/);
  t.match(r.stderr, /empty log files are not rotated, log files >= 1073741824 are rotated earlier/);
  t.notMatch(r.stderr, /error/);
});

t.test('a rotation while ipr serve writes the access log: nothing lost, nothing cut', async (t) => {
  const dir = testDir(t);
  const log = path.join(dir, 'access.log');
  const server = await startServer(t, { args: ['--access-log', log] });
  for (let i = 0; i < 20; i++) await check(server.port, null, { ip: '8.8.8.8' });
  t.equal((await settledLines(log, 20)).length, 20, '20 lines before the rotation');

  const installed = path.join(dir, 'logrotate.conf');
  const text = readFileSync(config, 'utf8');
  t.ok(text.includes('/var/log/ipr/access.log {'), 'the shipped path');
  writeFileSync(installed, text.replace('/var/log/ipr/access.log {', `${log} {`));
  await run('logrotate', ['-f', '-s', path.join(dir, 'state'), installed]);
  const rotated = readdirSync(dir).filter((f) => /^access\.log-[0-9]{8}-[0-9]+$/.test(f));
  t.equal(rotated.length, 1, `one rotated file, not compressed yet (delaycompress): ${rotated.join(', ')}`);
  t.equal((await settledLines(path.join(dir, rotated[0]!), 20)).length, 20, 'the lines before the rotation are in it');
  t.equal(readFileSync(log, 'utf8'), '', 'the log was truncated in place');

  for (let i = 0; i < 7; i++) await check(server.port, null, { ip: '1.1.1.1' });
  const after = await settledLines(log, 7);
  t.equal(after.length, 7, 'the server goes on writing into the same file');
  t.equal(readFileSync(log)[0], '{'.charCodeAt(0), 'from its start: no hole of zero bytes before the new lines');
  t.ok(after.every((l) => l.status === 401), 'whole JSON lines');
});
