// Abuse on loopback, each case bounded in time: thousands of idle
// connections, slow clients dribbling a header, oversized headers and
// bodies, a flood of bad keys from one address, a flood from one valid key.
// The server keeps answering others (within a generous 5 s: no speed is
// asserted here), stays within bounded memory (RSS from /proc), and closes
// what it should.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { accountStore, accountWithKey, check, exchange, request, startServer, type Server } from './server.js';

const MiB = 2 ** 20;
/** An answer this slow would mean the server is starved, not busy. */
const RESPONSIVE_MS = 5000;

/** The server's resident memory in bytes: anonymous (heaps, buffers) and file-backed (the snapshot's map). */
function rss(server: Server): { anon: number; file: number } {
  const status = readFileSync(`/proc/${server.process.pid}/status`, 'utf8');
  const kib = (name: string) => Number(new RegExp(`${name}:\\s+([0-9]+) kB`).exec(status)![1]) * 1024;
  return { anon: kib('RssAnon'), file: kib('RssFile') };
}

/** The soft limit on open files of process `pid`. */
function fileLimit(pid: number): number {
  return Number(/Max open files\s+([0-9]+)/.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'))![1]);
}

/** Raises the open-file limit of this process and the server's to `wanted` when lower (root may; else it stays). */
function raiseFileLimit(pids: number[], wanted: number): number {
  for (const pid of pids.filter((p) => fileLimit(p) < wanted)) {
    try {
      execFileSync('prlimit', [`--pid=${pid}`, `--nofile=${wanted}:${wanted}`], { stdio: 'pipe' });
    } catch {
      // not allowed: keep the current limit
    }
  }
  return Math.min(...pids.map(fileLimit));
}

/** A check with `key` must answer 200 within RESPONSIVE_MS; resolves with how long it took. */
async function answersWhileBusy(t: Test, server: Server, key: string, what: string): Promise<number> {
  const started = Date.now();
  const r = await Promise.race([check(server.port, key, { ip: '8.8.8.8' }), sleep(RESPONSIVE_MS).then(() => null)]);
  const ms = Date.now() - started;
  t.equal(r?.status, 200, `${what}: another customer's check answers 200 within ${RESPONSIVE_MS / 1000} s (${ms} ms)`);
  return ms;
}

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

t.test('thousands of idle connections and slow clients: others are answered, memory stays bounded, the server closes them after its idle timeout', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'other@example.com', 'enterprise');
  const limit = raiseFileLimit([process.pid, server.process.pid!], 8192);
  const idle = Math.min(3000, limit - 512);
  const slow = 200;
  await check(server.port, key, { ip: '8.8.8.8' });
  const before = rss(server);

  const sockets: net.Socket[] = [];
  const idleClosed: number[] = [];
  const opened = Date.now();
  for (let i = 0; i < idle; i++) {
    const socket = await connect(server.port);
    socket.on('close', () => idleClosed.push(Date.now() - opened));
    socket.on('error', () => {});
    sockets.push(socket);
  }
  t.teardown(() => sockets.forEach((s) => s.destroy()));
  // Slow clients: a byte every 500 ms of a header that never ends.
  const slowStarted = Date.now();
  const slowClients = Array.from({ length: slow }, async () => {
    const socket = await connect(server.port);
    socket.on('error', () => {});
    const text = `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ${'a'.repeat(1000)}`;
    let sent = 0;
    const timer = setInterval(() => socket.write(text[sent++ % text.length]!), 500);
    const closed = await Promise.race([new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now() - slowStarted))), sleep(30_000).then(() => null)]);
    clearInterval(timer);
    socket.destroy();
    return { closed, sent };
  });
  await sleep(2000);
  const during = rss(server);
  const ms = await answersWhileBusy(t, server, key, `${idle} idle connections and ${slow} slow clients`);
  t.ok(during.anon - before.anon < 64 * MiB, `${idle + slow} connections cost ${((during.anon - before.anon) / MiB).toFixed(1)} MiB (under 64)`);

  // uWS closes an HTTP connection that has not completed a request within about 10 s, however slowly it sends.
  const results = await Promise.all(slowClients);
  for (let waited = 0; idleClosed.length < idle && waited < 20_000; waited += 250) await sleep(250);
  t.equal(idleClosed.length, idle, 'the server closed every idle connection by itself');
  const idleTimes = [...idleClosed].sort((a, b) => a - b);
  t.ok(idleTimes[0]! >= 4000, `none before 4 s (the first after ${idleTimes[0]} ms)`);
  const slowTimes = results.map((r) => r.closed).filter((c): c is number => c !== null).sort((a, b) => a - b);
  t.equal(slowTimes.length, slow, 'every slow client was closed by the server within 30 s');
  t.comment(
    `${idle} idle connections (open-file limit ${limit}) and ${slow} slow clients: RssAnon ${(before.anon / MiB).toFixed(0)} -> ${(during.anon / MiB).toFixed(0)} MiB; ` +
      `a check answered in ${ms} ms meanwhile; idle ones closed by the server after ${idleTimes[0]}..${idleTimes.at(-1)} ms, ` +
      `slow ones after ${slowTimes[0]}..${slowTimes.at(-1)} ms having sent ${Math.min(...results.map((r) => r.sent))}..${Math.max(...results.map((r) => r.sent))} bytes`,
  );
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200);
});

t.test('oversized headers and bodies: refused without buffering them', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'big@example.com', 'enterprise');
  await check(server.port, key, { ip: '8.8.8.8' });
  const before = rss(server);

  // A header block over 4 KiB that arrives in pieces: uWS closes the connection without an answer.
  const socket = await connect(server.port);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  let answer = '';
  socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
  socket.write('GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ');
  for (let i = 0; i < 64 && !socket.destroyed; i++) {
    socket.write('b'.repeat(1024));
    await sleep(5);
  }
  await Promise.race([closed, sleep(RESPONSIVE_MS)]);
  t.ok(socket.destroyed || socket.readableEnded, 'a 64 KiB header block in 1 KiB pieces: the connection is closed');
  t.equal(answer, '', 'without an answer');
  socket.destroy();

  // More than 48 header lines: no answer, the connection closed when the client ends it.
  const many = `GET /v1/health HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 60 }, (_, i) => `X-H${i}: v`).join('\r\n')}\r\n\r\n`;
  const crowded = await exchange(server.port, many, 1, { end: true });
  t.same([crowded.answers.length, crowded.closed], [0, true], '60 header lines: closed without an answer');

  // 50 MiB bodies, declared or chunked: 413 (the server reads no more than
  // 8 KiB of it), the rest passed over as it streams in, and the same
  // connection then answers the next request.
  const auth = `Authorization: Bearer ${key}\r\nContent-Type: application/json\r\n`;
  const huge = Buffer.alloc(50 * MiB, 0x20);
  for (const [label, bytes] of [
    ['declared', Buffer.concat([Buffer.from(`POST /v1/check HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: ${huge.length}\r\n\r\n`), huge])],
    ['chunked', Buffer.concat([Buffer.from(`POST /v1/check HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\n${huge.length.toString(16)}\r\n`), huge, Buffer.from('\r\n0\r\n\r\n')])],
  ] as const) {
    const started = Date.now();
    const { answers } = await exchange(server.port, Buffer.concat([bytes, Buffer.from('GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n')]), 2, { timeoutMs: 30_000 });
    t.same(
      answers.map((a) => [a.status, a.body]),
      [
        [413, JSON.stringify({ error: 'payload_too_large', message: 'The request body is too large', details: { max_bytes: 8192 } })],
        [200, '{"status":"healthy"}'],
      ],
      `50 MiB ${label}: 413, then the next request on the connection`,
    );
    t.comment(`50 MiB ${label}: both answers in ${Date.now() - started} ms`);
  }
  const after = rss(server);
  t.ok(after.anon - before.anon < 64 * MiB, `memory: RssAnon ${(before.anon / MiB).toFixed(0)} -> ${(after.anon / MiB).toFixed(0)} MiB`);
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200, 'still serving');
});

t.test('a flood of bad keys from one address: 20 a second get 401, the rest 429; other addresses and valid keys unaffected', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'good@example.com', 'enterprise');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32, localAddress: '127.0.0.5' });
  t.teardown(() => agent.destroy());
  const started = Date.now();
  const statuses = new Map<number, number>();
  let guess = 0;
  const flood = async () => {
    while (Date.now() - started < 3000) {
      const r = await check(server.port, `ipr_guess${String(guess++).padStart(39, '0')}`, { ip: '8.8.8.8' }, { agent });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    }
  };
  const flooding = Promise.all(Array.from({ length: 32 }, flood));
  await sleep(1000);
  // From another address, a bad key still gets its 401; from the flooding one, a valid key its 200.
  const elsewhere = await exchange(server.port, `POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ipr_${'z'.repeat(43)}\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{"ip":"8.8.8.8"}`, 1, {
    localAddress: '127.0.0.6',
  });
  t.equal(elsewhere.answers[0]?.status, 401, 'another address is not limited by this one');
  const valid = await exchange(server.port, `POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{"ip":"8.8.8.8"}`, 1, {
    localAddress: '127.0.0.5',
  });
  t.equal(valid.answers[0]?.status, 200, 'a valid key from the flooding address is answered');
  await flooding;
  const seconds = Math.ceil((Date.now() - started) / 1000);
  const refused = statuses.get(401) ?? 0;
  t.ok(refused <= 20 * (seconds + 1), `${refused} guesses answered 401 in ${seconds} s: at most 20 per second`);
  t.ok(refused >= 20, 'at least the first second was answered');
  t.same([...statuses.keys()].sort(), [401, 429], 'every other guess: 429');
  t.comment(`bad-key flood from one address: ${guess} guesses in ${seconds} s, ${refused} answered 401, ${statuses.get(429)} answered 429`);
});

t.test('a flood from one valid key: its limit holds, another key is answered, memory stays bounded', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const flooder = await accountWithKey(store, 'flood@example.com', 'enterprise'); // 100 a second
  const other = await accountWithKey(store, 'other@example.com', 'pro');
  await check(server.port, other, { ip: '8.8.8.8' });
  const before = rss(server);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  t.teardown(() => agent.destroy());
  const started = Date.now();
  const statuses = new Map<number, number>();
  let sent = 0;
  const flood = async () => {
    while (Date.now() - started < 4000) {
      sent++;
      const r = await check(server.port, flooder, { ip: `${sent % 223}.${sent % 251}.${sent % 199}.1` }, { agent });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    }
  };
  const flooding = Promise.all(Array.from({ length: 64 }, flood));
  const waits: number[] = [];
  for (let i = 0; i < 5; i++) {
    await sleep(500);
    waits.push(await answersWhileBusy(t, server, other, 'a flood from one key'));
  }
  await flooding;
  const seconds = Math.ceil((Date.now() - started) / 1000);
  const during = rss(server);
  t.ok((statuses.get(200) ?? 0) <= 100 * (seconds + 1), `the flooding key got ${statuses.get(200)} answers in ${seconds} s: at most 100 per second`);
  t.same([...statuses.keys()].sort(), [200, 429]);
  t.ok(during.anon - before.anon < 64 * MiB, `memory: RssAnon ${(before.anon / MiB).toFixed(0)} -> ${(during.anon / MiB).toFixed(0)} MiB`);
  t.comment(`valid-key flood: ${sent} requests in ${seconds} s from 64 connections (${statuses.get(200)} answered 200, ${statuses.get(429)} 429); another key answered in ${waits.join(', ')} ms`);
  t.equal((await request(server.port, '/v1/health', { method: 'GET' })).status, 200);
});
