// Behind a reverse proxy (`ipr serve --trust-proxy`) the API sees the client
// the proxy forwarded (the last address of X-Forwarded-For), as the
// dashboard does: for a key's allowed source addresses, the limit on
// requests without a valid key and the access log. Without the option the
// header is ignored, whatever it says.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { testDir } from './helpers.js';
import { accountStore, accountWithKey, check, startServer } from './server.js';

const forwarded = (xff: string) => ({ headers: { 'x-forwarded-for': xff } });

t.test('a key allowed from one network: the forwarded client decides behind a trusted proxy, never otherwise', async (t) => {
  const accessLog = path.join(testDir(t), 'access.log');
  const server = await startServer(t, { workers: 1, args: ['--trust-proxy', '--access-log', accessLog] });
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'a@example.com', 'pro', ['203.0.113.0/24']);
  const ip = { ip: '8.8.8.8' };
  t.equal((await check(server.port, key, ip)).status, 403, 'the proxy itself (127.0.0.1) is not the client');
  t.equal((await check(server.port, key, ip, forwarded('203.0.113.9'))).status, 200, 'the forwarded client');
  t.equal((await check(server.port, key, ip, forwarded('203.0.113.9, 198.51.100.7'))).status, 403, 'the last address: what the nearest proxy wrote');
  t.equal((await check(server.port, key, ip, forwarded('198.51.100.7, 203.0.113.9'))).status, 200);
  t.equal((await check(server.port, key, ip, forwarded('::ffff:203.0.113.9'))).status, 200, 'an IPv4-mapped client is the IPv4 one');
  t.equal((await check(server.port, key, ip, forwarded('203.0.113.09'))).status, 403, 'not an address by the strict parser: the peer counts');

  // Without a valid key: 20 a second per client, the forwarded one.
  const bad = 'ipr_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
  const statuses = await Promise.all(Array.from({ length: 25 }, () => check(server.port, bad, ip, forwarded('198.51.100.1')).then((r) => r.status)));
  t.equal(statuses.filter((s) => s === 429).length, 5, 'one client over its 20 a second');
  t.equal((await check(server.port, bad, ip, forwarded('198.51.100.2'))).status, 401, 'another forwarded client is not limited by it');

  await server.stop();
  const clients = readFileSync(accessLog, 'utf8').trim().split('\n').map((line) => (JSON.parse(line) as { client: string }).client);
  t.ok(clients.includes('203.0.113.9') && clients.includes('198.51.100.1'), 'the access log names the forwarded clients');
});

t.test('without --trust-proxy, X-Forwarded-For is ignored', async (t) => {
  const server = await startServer(t, { workers: 1 });
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'b@example.com', 'pro', ['203.0.113.0/24']);
  t.equal((await check(server.port, key, { ip: '8.8.8.8' }, forwarded('203.0.113.9'))).status, 403);
});
