// A local HTTP server of feed files, standing in for the upstream feeds (this
// machine cannot reach them) in the update tests and benchmarks. Each route
// serves a file or a text with an ETag (a hash of its content) and a
// Last-Modified date, answers conditional requests with 304, and can be told
// to fail: an HTTP status, never answering, or cutting the body in half.
//
//   const feeds = await startFeedServer();
//   feeds.route('/tor', { file: '.../exit-nodes-2024-02.lst' });
//   feeds.route('/vpn', { status: 500 });   // or { hang: true }, { cut: true, file }
//   feeds.url('/tor'); feeds.requests;      // what was asked and answered
//   await feeds.close();
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

/**
 * @typedef {{ file?: string, text?: string, status?: number, hang?: boolean, cut?: boolean }} Behaviour
 * file/text: the body (200, or 304 when If-None-Match names its ETag); status: answer
 * with that status; hang: accept and never answer; cut: declare the whole length of
 * file/text, send half of it, then close the connection (whatever the request's conditions).
 */

export async function startFeedServer() {
  /** @type {Map<string, Behaviour>} */
  const routes = new Map();
  /** @type {{ path: string, status: number | null, ifNoneMatch: string | null, ifModifiedSince: string | null }[]} */
  const requests = [];
  const server = http.createServer((req, res) => {
    const behaviour = routes.get(req.url ?? '');
    const entry = {
      path: req.url ?? '',
      status: null,
      ifNoneMatch: req.headers['if-none-match'] ?? null,
      ifModifiedSince: req.headers['if-modified-since'] ?? null,
    };
    requests.push(entry);
    if (behaviour === undefined) return answer(res, entry, 404, 'not found');
    if (behaviour.hang) return; // closed by close()
    if (behaviour.status !== undefined) return answer(res, entry, behaviour.status, `status ${behaviour.status}`);
    const body = behaviour.file !== undefined ? readFileSync(behaviour.file) : Buffer.from(behaviour.text ?? '');
    const etag = `"${createHash('sha1').update(body).digest('hex')}"`;
    const modified = behaviour.file !== undefined ? statSync(behaviour.file).mtime : new Date(0);
    if (req.headers['if-none-match'] === etag && !behaviour.cut) {
      entry.status = 304;
      res.writeHead(304, { etag }).end();
      return;
    }
    entry.status = 200;
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length, etag, 'last-modified': modified.toUTCString() });
    if (behaviour.cut) {
      res.write(body.subarray(0, body.length >> 1), () => res.socket?.destroy());
      return;
    }
    res.end(body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    requests,
    /** @param {string} route @param {Behaviour} behaviour */
    route(route, behaviour) {
      routes.set(route, behaviour);
    },
    /** @param {string} route */
    url(route) {
      return `http://127.0.0.1:${port}${route}`;
    },
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve(undefined)));
    },
  };
}

/** @param {http.ServerResponse} res @param {{ status: number | null }} entry @param {number} status @param {string} text */
function answer(res, entry, status, text) {
  entry.status = status;
  res.writeHead(status, { 'content-type': 'text/plain' }).end(text);
}

/**
 * A sources configuration whose `path` sources (as in sources/feeds.sources.json)
 * are served by `feeds` instead, each at /<source name>: the same data, fetched
 * over HTTP as the default configuration fetches the upstreams. `package`
 * sources stay as they are. Returns the configuration object.
 * @param {string} configFile
 * @param {Awaited<ReturnType<typeof startFeedServer>>} feeds
 */
export function servedSources(configFile, feeds) {
  const config = JSON.parse(readFileSync(configFile, 'utf8'));
  const sources = config.sources.map((/** @type {Record<string, unknown>} */ source) => {
    if (typeof source.path !== 'string') return source;
    const { path: file, ...rest } = source;
    feeds.route(`/${source.name}`, { file: path.resolve(path.dirname(configFile), file) });
    return { ...rest, url: feeds.url(`/${source.name}`) };
  });
  return { sources };
}

/**
 * Two Tor exit lists in the Tor Project's bulk list format (one address per
 * line), to switch between as if the upstream list had changed: `current`,
 * the exits of tor/exits.csv, and `older`, tor/exit-nodes-2024-02.lst. With an
 * IPv4 address only in the older list (it enters the Tor flag when the list
 * switches to it) and one only in the current list (it leaves).
 * @param {string} feedsDir ../shared/data/feeds
 */
export function torLists(feedsDir) {
  const rows = readFileSync(path.join(feedsDir, 'tor', 'exits.csv'), 'utf8').trim().split('\n').slice(1);
  const current = [...new Set(rows.map((row) => row.split(',')[1].trim()))];
  const older = path.join(feedsDir, 'tor', 'exit-nodes-2024-02.lst');
  const olderSet = new Set(readFileSync(older, 'utf8').split('\n').map((l) => l.trim()).filter(Boolean));
  const currentSet = new Set(current);
  return {
    current: `${current.join('\n')}\n`,
    older,
    entered: [...olderSet].find((ip) => !currentSet.has(ip)),
    left: current.find((ip) => ip.includes('.') && !olderSet.has(ip)),
  };
}
