// A snapshot published by another process while traffic flows: no failed
// request, every worker answering from it within a second. And a graceful
// shutdown: requests in flight are answered, health turns 503, exit 0.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import t from 'tap';
import { buildSnapshot } from '../src/index.js';
import { cli, feeds, testDir } from './helpers.js';
import { accountStore, accountWithKey, check, startServer } from './server.js';

const VPN = { name: 'vpn', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') };
const TOR = { name: 'tor', kind: 'tor', format: 'tor-csv', path: path.join(feeds, 'tor/exits.csv') };
const TOR_IP = '204.8.96.141';

function sourcesFile(t: Parameters<typeof testDir>[0], name: string, sources: object[]): string {
  const file = path.join(testDir(t), `${name}.sources.json`);
  writeFileSync(file, JSON.stringify({ sources }));
  return file;
}

t.test('hot reload during traffic: no failed request, new answers within a second', async (t) => {
  const dataDir = path.join(testDir(t), 'data');
  await buildSnapshot({ sources: sourcesFile(t, 'before', [VPN]), dataDir });
  const server = await startServer(t, { dataDir, workers: 2 });
  const store = accountStore(t, dataDir);
  const key = await accountWithKey(store, 'ent@example.com', 'enterprise');

  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  t.teardown(() => agent.destroy());
  let running = true;
  let published = 0;
  let firstTor = 0;
  const statuses = new Map<number, number>();
  const client = async () => {
    while (running) {
      const r = await check(server.port, key, { ip: TOR_IP }, { agent });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.json?.is_tor && firstTor === 0) firstTor = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 25)); // two clients stay under enterprise's 100 per second
    }
  };
  const clients = [client(), client()];
  await new Promise((resolve) => setTimeout(resolve, 500));
  // Publish from another process, as an operator would.
  const build = spawn(process.execPath, [cli, 'build', '--sources', sourcesFile(t, 'after', [VPN, TOR]), '--data', dataDir], { stdio: 'ignore' });
  t.equal(await new Promise((resolve) => build.once('exit', resolve)), 0, 'ipr build published');
  published = Date.now();
  while (firstTor === 0 && Date.now() - published < 5000) await new Promise((resolve) => setTimeout(resolve, 10));
  await new Promise((resolve) => setTimeout(resolve, 300)); // both workers, some more traffic
  running = false;
  await Promise.all(clients);
  t.ok(firstTor > 0 && firstTor - published < 1000, `answered from the new snapshot ${firstTor - published} ms after publication`);
  t.same([...statuses.keys()], [200], `${statuses.get(200)} requests, all 200`);
  // Every worker moved: many fresh connections all see the new data.
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const fresh = await Promise.all(Array.from({ length: 20 }, () => check(server.port, key, { ip: TOR_IP })));
  t.same(new Set(fresh.map((r) => r.json.is_tor)), new Set([true]));
});

/** Sends the head and half the body of a check request; returns a function that sends the rest and resolves with the raw response. */
function halfSentRequest(port: number, key: string): Promise<() => Promise<string>> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ ip: '8.8.8.8' });
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(`POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`);
      let response = '';
      socket.on('data', (d) => (response += d));
      resolve(
        () =>
          new Promise((done) => {
            socket.once('close', () => done(response));
            socket.write(body.slice(5));
          }),
      );
    });
    socket.once('error', reject);
  });
}

t.test('SIGTERM: stop accepting, answer what is in flight, health 503, exit 0', async (t) => {
  const server = await startServer(t, { workers: 2 });
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'ent@example.com', 'enterprise');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  t.equal((await check(server.port, key, { ip: '8.8.8.8' }, { agent })).status, 200, 'a keep-alive connection open');
  const inFlight = await Promise.all(Array.from({ length: 6 }, () => halfSentRequest(server.port, key)));

  const exit = server.stop('SIGTERM');
  await new Promise((resolve) => setTimeout(resolve, 300));
  const health = await new Promise<http.IncomingMessage & { text?: string }>((resolve) =>
    http.get({ host: '127.0.0.1', port: server.port, path: '/v1/health', agent }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve(Object.assign(res, { text })));
    }),
  );
  t.equal(health.statusCode, 503, 'health on an open connection while draining');
  t.equal(health.text, '{"status":"unavailable"}');
  t.equal(health.headers.connection, 'close');
  const refused = await new Promise<string>((resolve) => {
    const s = net.connect(server.port, '127.0.0.1');
    s.once('connect', () => resolve('connected'));
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
  });
  t.equal(refused, 'ECONNREFUSED', 'no new connections');

  const answers = await Promise.all(inFlight.map((finish) => finish()));
  for (const a of answers) {
    t.match(a, /^HTTP\/1\.1 200 OK\r\n/, 'the request in flight was answered');
    t.match(a, /\r\nConnection: close\r\n/i);
  }
  t.equal(await exit, 0, 'exit 0');
  t.match(server.output(), /SIGTERM: finishing requests in flight[\s\S]*stopped/);
});
