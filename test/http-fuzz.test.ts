// HTTP fuzzing: a seeded stream of hostile requests (test/hostile-http.ts)
// over raw TCP connections, pipelined, against a real server. Every request
// uWS parses gets exactly the answer docs/API.md requires (valid ones the
// reference snapshot's answer, byte for byte); requests with broken framing
// get no answer and a closed connection; nothing answers 500 or malformed
// HTTP, and no worker dies. IPR_FUZZ_REQUESTS and IPR_FUZZ_SEED run more;
// IPR_FUZZ_REPORT names a file for the first 20 mismatches in full.
import { writeFileSync } from 'node:fs';
import t from 'tap';
import { seededAddresses } from '../bench/addresses.js';
import { ERROR_CODES } from '../src/errors.js';
import { openSnapshot } from '../src/index.js';
import { hostileRequest, Random, type FuzzContext, type Hostile } from './hostile-http.js';
import { fullDataDir } from './helpers.js';
import { accountStore, accountWithKey, exchange, plansFile, request, startServer, type RawAnswer } from './server.js';

const REQUESTS = Number(process.env.IPR_FUZZ_REQUESTS ?? 100_000);
const SEED = Number(process.env.IPR_FUZZ_SEED ?? 6);
const CONNECTIONS = 32;
const PIPELINE = 16;
const UNLIMITED = 1_000_000_000;

/** What is wrong with `got` as an answer to `request`, or null. */
function mismatch(request: Hostile, got: RawAnswer): string | null {
  const allowed = request.answers!.find((a) => a.status === got.status);
  if (allowed === undefined) return `status ${got.status}, expected ${request.answers!.map((a) => a.status).join(' or ')}: ${got.body.slice(0, 200)}`;
  const expected = Buffer.from(allowed.body).toString('latin1'); // the UTF-8 bytes, as the answer was read
  if (got.body !== expected) {
    let at = 0;
    while (got.body[at] === expected[at]) at++;
    return `status ${got.status} body differs at byte ${at}: ${JSON.stringify(got.body.slice(Math.max(0, at - 40), at + 80))}, expected ${JSON.stringify(expected.slice(Math.max(0, at - 40), at + 80))}`;
  }
  for (const [name, value] of Object.entries(allowed.headers)) {
    if (got.headers[name] !== value) return `${name}: ${got.headers[name]}, expected ${value}`;
  }
  return null;
}

/** An answer the server gave to a request whose framing was broken: any answer of the API, never a 500. */
function wellFormed(got: RawAnswer): string | null {
  if (got.status === 200) return null;
  let body: { error?: string; message?: string } | undefined;
  try {
    body = JSON.parse(got.body);
  } catch {
    return `status ${got.status} with a body that is not JSON`;
  }
  const code = ERROR_CODES[body?.error as keyof typeof ERROR_CODES];
  if (got.status === 500 || code === undefined || code.status !== got.status) return `status ${got.status}: ${got.body.slice(0, 200)}`;
  return null;
}

t.test(`${REQUESTS.toLocaleString('en-US')} hostile requests: exact answers, no 500, no dropped worker`, async (t) => {
  const server = await startServer(t, { env: { IPR_PLANS_CONFIG: plansFile(t, { unlimited: [null, UNLIMITED] }) } });
  const store = accountStore(t, server.dataDir);
  const valid = await accountWithKey(store, 'fuzz@example.com', 'unlimited');
  const revoked = store.createKey('fuzz@example.com', 'revoked').key;
  store.revokeKey('fuzz@example.com', revoked.slice(0, 8));
  const elsewhere = store.createKey('fuzz@example.com', 'elsewhere', ['192.0.2.0/24']).key;
  const suspended = await accountWithKey(store, 'suspended@example.com', 'unlimited');
  store.setStatus('suspended@example.com', 'suspended');
  const reference = openSnapshot(fullDataDir);
  t.teardown(() => reference.close());
  const ctx: FuzzContext = {
    keys: { valid, revoked, suspended, elsewhere, validLimit: UNLIMITED },
    reference,
    openapi: (await request(server.port, '/v1/openapi.json', { method: 'GET' })).text,
    addresses: seededAddresses(5000, SEED),
    unkeyedPerSecond: 20,
  };

  const random = new Random(SEED);
  const kinds = new Map<string, number>();
  const statuses = new Map<number, number>();
  const problems: string[] = []; // the first 20
  let mismatches = 0;
  let sent = 0;
  let connections = 0;
  let brokenAnswered = 0;
  let lost = 0;
  const problem = (what: string) => {
    if (mismatches++ < 20) problems.push(what);
  };

  // Each connection: up to PIPELINE parseable requests in one write (one
  // that announces a body it does not send ends it), or some followed by a
  // request with broken framing, sent with the end of the connection.
  const nextConnection = (): Hostile[] => {
    const batch: Hostile[] = [];
    const size = 1 + random.int(PIPELINE);
    while (batch.length < size && sent < REQUESTS) {
      const r = hostileRequest(random, ctx);
      batch.push(r);
      sent++;
      kinds.set(r.kind, (kinds.get(r.kind) ?? 0) + 1);
      if (r.ends) break;
    }
    return batch;
  };

  const started = Date.now();
  const client = async (index: number) => {
    const localAddress = `127.0.0.${2 + index}`;
    for (let batch = nextConnection(); batch.length > 0; batch = nextConnection()) {
      connections++;
      const last = batch.at(-1)!;
      const parsed = last.answers === null ? batch.slice(0, -1) : batch;
      const result = await exchange(server.port, Buffer.concat(batch.map((r) => r.bytes)), parsed.length, {
        head: parsed.map((r) => r.head),
        localAddress,
        timeoutMs: 20_000,
        end: last.answers === null,
      });
      if (result.malformed !== null) problem(`malformed answer: ${result.malformed}`);
      for (const [i, r] of parsed.entries()) {
        const got = result.answers[i];
        if (got === undefined) {
          // uWS closes a connection as soon as it meets broken framing, and
          // drops the answers it had not yet written for requests read with it.
          if (last.answers === null && result.closed) {
            lost++;
            continue;
          }
          // Only the first request left unanswered says something: the ones after it were never read.
          if (i === result.answers.length) {
            const all = process.env.IPR_FUZZ_REPORT ? `\n  the connection's requests:\n${batch.map((b) => JSON.stringify(b.bytes.toString('latin1'))).join('\n')}` : '';
            problem(`${r.kind}: no answer (connection ${result.closed ? 'closed' : 'open'}): ${JSON.stringify(r.bytes.toString('latin1').slice(0, 300))}${all}`);
          }
          continue;
        }
        statuses.set(got.status, (statuses.get(got.status) ?? 0) + 1);
        const wrong = mismatch(r, got);
        if (wrong !== null) problem(`${r.kind}: ${wrong}\n  request: ${JSON.stringify(r.bytes.toString('latin1').slice(0, 400))}`);
      }
      for (const got of result.answers.slice(parsed.length)) {
        // Only a broken request's own bytes can bring more answers (the part uWS took as a request).
        brokenAnswered++;
        const wrong = last.answers === null ? wellFormed(got) : `an answer too many: ${got.status}`;
        if (wrong !== null) problem(`after ${last.kind}: ${wrong}`);
      }
      if (last.answers === null && !result.closed) problem(`broken framing: the connection stayed open after the client ended it`);
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, (_, i) => client(i)));
  const seconds = (Date.now() - started) / 1000;

  t.comment(
    `${sent.toLocaleString('en-US')} requests on ${connections.toLocaleString('en-US')} connections in ${seconds.toFixed(1)} s, seed ${SEED}; ` +
      `by kind: ${[...kinds].map(([k, n]) => `${k} ${n}`).join(', ')}; answers: ${[...statuses].sort().map(([s, n]) => `${s}: ${n}`).join(', ')}; ` +
      `answers to broken framing: ${brokenAnswered}; answers dropped with a broken request read after them: ${lost}`,
  );
  t.equal(sent, REQUESTS);
  if (process.env.IPR_FUZZ_REPORT) writeFileSync(process.env.IPR_FUZZ_REPORT, problems.join('\n\n'));
  t.same(problems, [], `every answer as the model says (${mismatches} not)`);
  t.notOk(statuses.has(500), 'no 500');
  for (const status of [200, 400, 401, 404, 405, 413, 415]) t.ok(statuses.has(status), `some ${status} answers`);

  // The server still answers, and nothing failed or died on the way.
  const health = await request(server.port, '/v1/health', { method: 'GET' });
  t.same([health.status, health.text], [200, '{"status":"healthy"}']);
  t.equal(server.process.exitCode, null, 'the server is running');
  t.notMatch(server.output(), /worker exited|request failed/, 'no worker died and no request failed');
});
