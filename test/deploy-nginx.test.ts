// The deployment kit's nginx site (deploy/nginx/ipr.conf and
// ipr-locations.conf), installed as docs/DEPLOY.md says with its
// placeholders filled (ports on loopback, a certificate made here with
// openssl), accepted by `nginx -t` and run by Debian's nginx in front of a
// real `ipr serve --trust-proxy`: the API and a dashboard sign-in work over
// HTTPS, the session cookie is Secure and answers carry HSTS, plain HTTP is
// sent to HTTPS (but for ACME challenges), and the edge answers in the API's error body (413, and 503
// while the server is down).
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { fullDataDir, root, testDir } from './helpers.js';
import { freePort, nginxTest, startNginx, writeNginxConf } from './nginx.js';
import { accountStore, accountWithKey, PASSWORD, startServer } from './server.js';

const HOST = 'ipr.example.com';

/** The site as an operator installs it: every placeholder replaced, each one required to be there. */
function installSite(dir: string, ports: { http: number; https: number; server: number }, cert: string, key: string): string {
  let site = readFileSync(path.join(root, 'deploy', 'nginx', 'ipr.conf'), 'utf8');
  const replace = (from: string, to: string) => {
    if (!site.includes(from)) throw new Error(`deploy/nginx/ipr.conf no longer has ${JSON.stringify(from)}`);
    site = site.split(from).join(to);
  };
  replace('server 127.0.0.1:8080;', `server 127.0.0.1:${ports.server};`);
  replace('    listen [::]:80;\n', '');
  replace('    listen [::]:443 ssl http2;\n', '');
  replace('listen 80;', `listen 127.0.0.1:${ports.http};`);
  replace('listen 443 ssl http2;', `listen 127.0.0.1:${ports.https} ssl http2;`);
  replace(`/etc/letsencrypt/live/${HOST}/fullchain.pem`, cert);
  replace(`/etc/letsencrypt/live/${HOST}/privkey.pem`, key);
  replace('/etc/nginx/snippets/ipr-locations.conf', path.join(root, 'deploy', 'nginx', 'ipr-locations.conf'));
  const file = path.join(dir, 'ipr.conf');
  writeFileSync(file, site);
  return file;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

function fetchOver(
  secure: boolean,
  port: number,
  ca: string,
  method: string,
  urlPath: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const options = { host: '127.0.0.1', port, method, path: urlPath, headers: { host: `${HOST}:${port}`, ...headers }, servername: HOST, ca, agent: false as const };
    const req = (secure ? https : http).request(options, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

t.test('nginx -t accepts the site as installed, and it serves the API and the dashboard over HTTPS', async (t) => {
  const dir = testDir(t);
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', `/CN=${HOST}`, '-addext', `subjectAltName=DNS:${HOST}`], { stdio: 'ignore' });
  const ca = readFileSync(cert, 'utf8');
  const ports = { http: await freePort(), https: await freePort(), server: await freePort() };
  const site = installSite(dir, ports, cert, key);

  const checked = nginxTest(writeNginxConf(path.join(dir, 'nginx-t'), `  include ${site};`));
  t.equal(checked.code, 0, 'nginx -t exits 0');
  t.match(checked.output, /syntax is ok/);
  t.match(checked.output, /test is successful/);

  const server = await startServer(t, { port: ports.server, args: ['--trust-proxy'] });
  const store = accountStore(t, server.dataDir);
  const apiKey = await accountWithKey(store, 'customer@example.com', 'pro');
  await startNginx(t, `  include ${site};`, [ports.http, ports.https]);
  const get = (method: string, urlPath: string, headers?: Record<string, string>, body?: string) => fetchOver(true, ports.https, ca, method, urlPath, headers, body);

  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const check = await get('POST', '/v1/check', { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, '{"ip":"204.8.96.141"}');
  t.equal(check.status, 200);
  t.same(JSON.parse(check.text), snapshot.lookup('204.8.96.141'), 'the API answers through nginx');
  t.equal(check.headers['x-ratelimit-limit'], '100000', "the plan's headers pass through");

  const origin = `https://${HOST}:${ports.https}`;
  const signIn = await get('POST', '/dashboard/api/session', { 'content-type': 'application/json', origin, 'sec-fetch-site': 'same-origin' }, JSON.stringify({ email: 'customer@example.com', password: PASSWORD }));
  t.equal(signIn.status, 200, 'signed in through nginx');
  const cookie = [signIn.headers['set-cookie']].flat().join('\n');
  t.match(cookie, /^ipr_session=[A-Za-z0-9_-]+; Path=\/dashboard; HttpOnly; SameSite=Strict; Secure;/, 'the session cookie is Secure over HTTPS');
  t.equal(signIn.headers['strict-transport-security'], 'max-age=31536000', 'HSTS over HTTPS');
  const session = /ipr_session=([A-Za-z0-9_-]+)/.exec(cookie)![1]!;
  const keys = await get('GET', '/dashboard/api/keys', { cookie: `ipr_session=${session}` });
  t.equal(keys.status, 200);
  t.same(JSON.parse(keys.text).keys.map((k: { prefix: string }) => k.prefix), [apiKey.slice(0, 8)], 'the signed-in session sees its keys');
  const page = await get('GET', '/', {});
  t.equal(page.status, 302);
  t.equal(page.headers.location, `https://${HOST}:${ports.https}/dashboard`);

  const plain = await fetchOver(false, ports.http, ca, 'GET', '/dashboard?x=1');
  t.equal(plain.status, 301);
  t.equal(plain.headers.location, `https://${HOST}/dashboard?x=1`, 'plain HTTP goes to HTTPS');
  const plainSignIn = await fetchOver(false, ports.http, ca, 'POST', '/dashboard/api/session', { 'content-type': 'application/json' }, '{}');
  t.equal(plainSignIn.status, 301, 'no sign-in over plain HTTP');
  t.equal((await fetchOver(false, ports.http, ca, 'GET', '/.well-known/acme-challenge/a-token')).status, 404, 'ACME challenges are answered over HTTP (from the webroot)');

  const huge = await get('POST', '/v1/check', { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, JSON.stringify({ ip: 'x'.repeat(200_000) }));
  t.equal(huge.status, 413);
  t.same(JSON.parse(huge.text), { error: 'payload_too_large', message: 'The request body is too large', details: { max_bytes: 131072 } }, "nginx's refusal in the API's error body");

  await server.stop();
  const down = await get('POST', '/v1/check', { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' }, '{"ip":"8.8.8.8"}');
  t.equal(down.status, 503);
  t.equal(down.headers['retry-after'], '2');
  t.same(JSON.parse(down.text), { error: 'unavailable', message: 'The service is starting or shutting down', details: {} }, 'while the server is down');
});
