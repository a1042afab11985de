/**
 * Black-box HTTP testing: a real `ipr serve` process on 127.0.0.1, raw HTTP
 * requests to it, and the account store opened beside it (as the CLI or the
 * dashboard would, from another process).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import type { Test } from 'tap';
import { AccountStore } from '../src/store/accounts.js';
import { cli, fullDataDir, testDir } from './helpers.js';

export interface Server {
  port: number;
  dataDir: string;
  process: ChildProcess;
  /** Everything the server wrote to stdout and stderr so far. */
  output(): string;
  /** SIGTERM, then the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface ServerOptions {
  /** A data folder; default: a fresh one whose snapshots/ is the full real-data fixture's. */
  dataDir?: string;
  workers?: number;
  /** The port (default 0: any free one); a fixed one lets a test start a server again where clients expect it. */
  port?: number;
  /** Start on the test clock, at this time. */
  clock?: number | string;
  env?: Record<string, string>;
  args?: string[];
}

/** A data folder of the test's own whose snapshots are the full fixture's. */
export function dataDirWithFullSnapshot(t: Test, name = 'data'): string {
  const dataDir = path.join(testDir(t), name);
  mkdirSync(dataDir, { recursive: true });
  symlinkSync(path.join(fullDataDir, 'snapshots'), path.join(dataDir, 'snapshots'));
  return dataDir;
}

/**
 * A data folder of the test's own holding a private copy of the full
 * fixture's snapshot (about 210 MiB), for tests that damage the file.
 */
export function dataDirWithSnapshotCopy(t: Test, name = 'data'): string {
  const dataDir = path.join(testDir(t), name);
  const snapshots = path.join(dataDir, 'snapshots');
  mkdirSync(snapshots, { recursive: true });
  const current = readFileSync(path.join(fullDataDir, 'snapshots', 'CURRENT'), 'utf8').trim();
  copyFileSync(path.join(fullDataDir, 'snapshots', current), path.join(snapshots, current));
  writeFileSync(path.join(snapshots, 'CURRENT'), `${current}\n`);
  return dataDir;
}

/**
 * A plans file with the default plans and `extra` ones (name: [per day or
 * null, per second]), for IPR_PLANS_CONFIG.
 */
export function plansFile(t: Test, extra: Record<string, [number | null, number]>): string {
  const file = path.join(testDir(t), 'plans.json');
  const plans: Record<string, { requests_per_day: number | null; requests_per_second: number }> = {
    free: { requests_per_day: 100, requests_per_second: 1 },
    starter: { requests_per_day: 10_000, requests_per_second: 10 },
    pro: { requests_per_day: 100_000, requests_per_second: 50 },
    enterprise: { requests_per_day: null, requests_per_second: 100 },
  };
  for (const [name, [perDay, perSecond]] of Object.entries(extra)) plans[name] = { requests_per_day: perDay, requests_per_second: perSecond };
  writeFileSync(file, JSON.stringify(plans));
  return file;
}

export function clockFile(t: Test): string {
  return path.join(testDir(t), 'clock');
}

/** Moves the server's test clock; resolves once the server has had time to read it. */
export async function setClock(t: Test, time: number | string): Promise<void> {
  writeFileSync(clockFile(t), String(time));
  await new Promise((resolve) => setTimeout(resolve, 120));
}

export async function startServer(t: Test, options: ServerOptions = {}): Promise<Server> {
  const dataDir = options.dataDir ?? dataDirWithFullSnapshot(t);
  const args = [cli, 'serve', '--data', dataDir, '--host', '127.0.0.1', '--port', String(options.port ?? 0), '--workers', String(options.workers ?? 2)];
  if (options.clock !== undefined) {
    writeFileSync(clockFile(t), String(options.clock));
    args.push('--clock', clockFile(t));
  }
  args.push(...(options.args ?? []));
  const child = spawn(process.execPath, args, { env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output}`)), 30_000);
    const check = () => {
      const match = /serving http:\/\/[^:]+:([0-9]+)\/v1/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    };
    child.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${output}`));
    });
  });
  let stopped: Promise<number | null> | null = null;
  const server: Server = {
    port,
    dataDir,
    process: child,
    output: () => output,
    stop(signal = 'SIGTERM') {
      stopped ??= (child.kill(signal), exited);
      return stopped;
    },
  };
  t.teardown(() => server.stop());
  return server;
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: any;
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Send the body with Transfer-Encoding: chunked, in pieces of this many bytes. */
  chunked?: number;
  agent?: http.Agent;
  /** The server's address to connect to (default 127.0.0.1; ::1 reaches a server listening on ::). */
  host?: string;
}

/** One raw HTTP request to the server. */
export function request(port: number, urlPath: string, options: RequestOptions = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const body = typeof options.body === 'string' ? Buffer.from(options.body) : options.body;
    const headers: Record<string, string> = { ...options.headers };
    if (body !== undefined && options.chunked === undefined) headers['content-length'] = String(body.length);
    const req = http.request(
      { host: options.host ?? '127.0.0.1', port, path: urlPath, method: options.method ?? 'POST', headers, agent: options.agent ?? false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode!, headers: res.headers, text, json });
        });
      },
    );
    req.on('error', reject);
    if (body !== undefined && options.chunked !== undefined) {
      for (let i = 0; i < body.length; i += options.chunked) req.write(body.subarray(i, i + options.chunked));
    } else if (body !== undefined) {
      req.write(body);
    }
    req.end();
  });
}

/** One HTTP/1.1 answer read off a raw connection. */
export interface RawAnswer {
  status: number;
  /** Header names in lower case; a repeated header keeps its last value. */
  headers: Record<string, string>;
  /** The content, as latin1 text (byte for byte). */
  body: string;
}

export interface Exchange {
  answers: RawAnswer[];
  /** The server closed the connection (before `count` answers, or after them within `waitMs`). */
  closed: boolean;
  /** Bytes after the last whole answer; an error message when the server's bytes are not HTTP. */
  rest: string;
  malformed: string | null;
  /** The socket error that ended the connection (ECONNRESET...), if one did. */
  error: string | null;
}

export interface ExchangeOptions {
  /** Which answers are to HEAD requests (no content follows their headers). */
  head?: boolean[];
  /** Give up after this long without the answers (default 5 s). */
  timeoutMs?: number;
  /** The client's address: any 127.0.0.0/8 address reaches a server on 127.0.0.1. */
  localAddress?: string;
  /** Once `count` answers are in, wait this long for a close before returning (default 0). */
  waitMs?: number;
  /** End the connection after the bytes (the server then answers what it parsed and closes). */
  end?: boolean;
}

/**
 * Parses whole HTTP/1.1 answers from `data`, strictly: a status line, header
 * lines, an empty line and Content-Length bytes of content (1xx interim
 * answers are skipped). Returns them and the offset after the last; sets
 * `malformed` when the bytes cannot be an answer.
 */
function parseAnswers(data: Buffer, head: boolean[], from: number): { answers: RawAnswer[]; offset: number; malformed: string | null } {
  const answers: RawAnswer[] = [];
  let offset = 0;
  for (;;) {
    const end = data.indexOf('\r\n\r\n', offset, 'latin1');
    if (end < 0) return { answers, offset, malformed: null };
    const lines = data.toString('latin1', offset, end).split('\r\n');
    const status = /^HTTP\/1\.1 ([1-5][0-9]{2}) [ -~]*$/.exec(lines[0]!);
    if (status === null) return { answers, offset, malformed: `not a status line: ${JSON.stringify(lines[0]!.slice(0, 80))}` };
    const headers: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const match = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+): ?([ -~\t]*)$/.exec(line);
      if (match === null) return { answers, offset, malformed: `not a header line: ${JSON.stringify(line.slice(0, 80))}` };
      headers[match[1]!.toLowerCase()] = match[2]!;
    }
    const code = Number(status[1]);
    if (code < 200) {
      offset = end + 4;
      continue;
    }
    const length = headers['content-length'];
    if (length === undefined || !/^[0-9]+$/.test(length)) return { answers, offset, malformed: `an answer without Content-Length: ${lines[0]}` };
    const size = head[from + answers.length] ? 0 : Number(length);
    if (data.length < end + 4 + size) return { answers, offset, malformed: null };
    answers.push({ status: code, headers, body: data.toString('latin1', end + 4, end + 4 + size) });
    offset = end + 4 + size;
  }
}

/**
 * Sends raw bytes on a new connection and reads up to `count` answers: for
 * what a normal client cannot send (pipelines, repeated or odd headers,
 * broken framing).
 */
export function exchange(port: number, bytes: string | Buffer, count: number, options: ExchangeOptions = {}): Promise<Exchange> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, ...(options.localAddress ? { localAddress: options.localAddress } : {}) });
    let data = Buffer.alloc(0);
    let answers: RawAnswer[] = [];
    let malformed: string | null = null;
    let closed = false;
    let error: string | null = null;
    let settled = false;
    let linger: NodeJS.Timeout | undefined;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(linger);
      socket.destroy();
      resolve({ answers, closed, rest: data.toString('latin1'), malformed, error });
    };
    const timer = setTimeout(finish, options.timeoutMs ?? 5000);
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const parsed = parseAnswers(data, options.head ?? [], answers.length);
      answers = answers.concat(parsed.answers);
      data = data.subarray(parsed.offset);
      malformed = parsed.malformed;
      if (malformed !== null) finish();
      else if (options.end) return; // until the server closes
      else if (answers.length > count) finish();
      else if (answers.length === count && linger === undefined) linger = setTimeout(finish, options.waitMs ?? 0);
    });
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      closed = true;
      error = e.code ?? e.message;
      finish();
    });
    if (options.end) socket.end(bytes);
    else socket.write(bytes);
  });
}

/** POST /v1/check with a key and a JSON body. */
export function check(port: number, key: string | null, body: unknown, extra: RequestOptions = {}): Promise<Reply> {
  return request(port, '/v1/check', {
    ...extra,
    headers: { 'content-type': 'application/json', ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...extra.headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** The account store of a server's data folder, closed at the end of the test. */
export function accountStore(t: Test, dataDir: string): AccountStore {
  const store = new AccountStore(dataDir);
  t.teardown(() => store.close());
  return store;
}

/** The password of the accounts tests make. */
export const PASSWORD = 'a long enough password';

/** Creates an account on `plan` and one key for it; returns the key. */
export async function accountWithKey(store: AccountStore, email: string, plan: string, allowed: string[] = []): Promise<string> {
  await store.createAccount(email, PASSWORD, plan);
  return store.createKey(email, 'test key', allowed).key;
}

/** A dashboard session as its cookie and pages hold it. */
export interface Signed {
  id: string;
  csrf: string;
}

export function cookieOf(reply: Reply): string {
  const header = reply.headers['set-cookie'];
  return Array.isArray(header) ? header.join('\n') : (header ?? '');
}

/** A dashboard call: JSON body, the session's cookie and (for a change) its CSRF token unless `headers` says otherwise. */
export function dash(port: number, method: string, urlPath: string, session: Signed | null = null, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const h: Record<string, string> = {};
  if (body !== undefined) h['content-type'] = 'application/json';
  if (session !== null) {
    h.cookie = `ipr_session=${session.id}`;
    if (method !== 'GET') h['x-csrf-token'] = session.csrf;
  }
  return request(port, `/dashboard/api/${urlPath}`, { method, headers: { ...h, ...headers }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
}

/** Signs in to the dashboard; throws unless it answers 200. */
export async function signIn(port: number, email: string, password = PASSWORD, headers: Record<string, string> = {}): Promise<Signed> {
  const r = await dash(port, 'POST', 'session', null, { email, password }, headers);
  if (r.status !== 200) throw new Error(`sign-in answered ${r.status}: ${r.text}`);
  const id = /ipr_session=([A-Za-z0-9_-]+);/.exec(cookieOf(r))![1]!;
  return { id, csrf: r.json.csrf_token };
}

/** Where the server's admin port listens, from its start-up line. */
export function adminAddress(server: Server): { host: string; port: number } {
  const match = /admin port http:\/\/([^:]+):([0-9]+) /.exec(server.output())!;
  return { host: match[1]!, port: Number(match[2]) };
}

export function admin(port: number, urlPath: string, options: { method?: string; token?: string; headers?: Record<string, string> } = {}) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }>((resolve, reject) => {
    const headers: Record<string, string> = { ...(options.token ? { authorization: `Bearer ${options.token}` } : {}), ...options.headers };
    http
      .request({ host: '127.0.0.1', port, path: urlPath, method: options.method ?? 'GET', headers }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
      })
      .on('error', reject)
      .end();
  });
}

/** The samples of a Prometheus text exposition: `name{labels}` -> value. */
export function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}
