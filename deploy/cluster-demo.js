// `npm run cluster:demo`: three `ipr serve` nodes sharing their customers
// and limits through one redis-server, on this machine, to try what
// docs/DEPLOY.md "Many nodes" describes. Needs Debian's redis-server and a
// data folder with a published snapshot (`npm start` makes ./data; or pass
// --data DIR). Ctrl-C stops everything; the demo's folders are removed.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const cli = path.join(root, 'dist', 'cli', 'main.js');
const { values } = parseArgs({ options: { data: { type: 'string', default: 'data' } } });
const dataDir = path.resolve(values.data);
const PORTS = [8081, 8082, 8083];
const ADMIN_PORT = 9464;

if (!existsSync(path.join(dataDir, 'snapshots', 'CURRENT'))) {
  console.error(`cluster:demo: no published snapshot in ${dataDir}: run "npm start" once (it builds one), or pass --data DIR`);
  process.exit(1);
}
try {
  execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
} catch {
  console.error('cluster:demo needs redis-server (Debian: apt-get install redis-server)');
  process.exit(1);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer().once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** Starts a child; resolves when its output matches `ready`. */
function start(command, args, ready, env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let output = '';
    const seen = (d) => {
      output += d;
      if (ready.test(output)) resolve(child);
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.once('exit', (code) => reject(new Error(`${path.basename(command)} exited with ${code}:\n${output}`)));
  });
}

const ipr = (...args) => execFileSync(process.execPath, [cli, ...args], { encoding: 'utf8', input: 'a demo password', stdio: ['pipe', 'pipe', 'inherit'] }).trim();

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-cluster-demo-'));
const children = [];
const stop = async () => {
  for (const child of children.reverse()) {
    if (child.exitCode !== null) continue;
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
  }
  rmSync(work, { recursive: true, force: true });
};
process.once('SIGINT', () => stop().then(() => process.exit(0)));
process.once('SIGTERM', () => stop().then(() => process.exit(0)));

try {
  const redisPort = await freePort();
  children.push(await start('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--dir', work, '--save', '', '--appendonly', 'yes'], /Ready to accept connections/));
  const store = `redis://127.0.0.1:${redisPort}`;
  for (const [i, port] of PORTS.entries()) {
    const node = path.join(work, `node${i + 1}`);
    mkdirSync(node);
    symlinkSync(path.join(dataDir, 'snapshots'), path.join(node, 'snapshots'));
    const admin = i === 0 ? ['--admin-port', String(ADMIN_PORT)] : [];
    children.push(await start(process.execPath, [cli, 'serve', '--data', node, '--port', String(port), '--workers', '1', '--store', store, ...admin], /serving http/));
  }
  ipr('accounts', 'create', '--store', store, '--email', 'demo@example.com', '--plan', 'free');
  const key = ipr('keys', 'create', '--store', store, '--account', 'demo@example.com', '--name', 'demo').split('\n').pop();
  const curl = (port) => `curl -s -H 'Authorization: Bearer ${key}' -H 'Content-Type: application/json' -d '{"ip":"8.8.8.8"}' http://127.0.0.1:${port}/v1/check`;
  console.log(`
Three nodes share their customers and limits through redis-server at ${store}:
  ${PORTS.map((p) => `http://127.0.0.1:${p}/v1`).join('   ')}
  (node 1's admin port: http://127.0.0.1:${ADMIN_PORT}/metrics, ipr_store_* for the shared store)

The account demo@example.com (plan free: 100 requests a day, 1 a second, for all nodes together) has the key
  ${key}

Try it:
  ${curl(PORTS[0])}
  ${curl(PORTS[1])}        (the same key, another node)
  for i in $(seq 120); do ${curl(PORTS[0]).replace('curl -s', 'curl -s -o /dev/null -w "%{http_code} "')}; sleep 1; done
                                           (the 101st request of the day is refused on every node)
  IPR_STORE=${store} npx ipr keys list --account demo@example.com
  IPR_STORE=${store} npx ipr keys revoke --account demo@example.com --prefix ${key.slice(0, 8)}
                                           (refused by all three nodes within milliseconds)
  kill -STOP ${children[0].pid}; sleep 70; kill -CONT ${children[0].pid}
                                           (Redis stopped: keys served from the leases held, then 503 after 60 s)

Ctrl-C stops the nodes and redis-server and removes ${work}.`);
} catch (error) {
  console.error(`cluster:demo: ${error.message}`);
  await stop();
  process.exit(1);
}
