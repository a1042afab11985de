/**
 * A real nginx (Debian's package) on loopback for the tests: its
 * configuration written into the test's folder around the `http` block a
 * test gives, a free port, run in the foreground and stopped at the end of
 * the test.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Test } from 'tap';
import { testDir } from './helpers.js';

/** Debian's nginx, and the GeoIP2 module of libnginx-mod-http-geoip2. */
export const NGINX = '/usr/sbin/nginx';
export const GEOIP2_MODULE = '/usr/lib/nginx/modules/ngx_http_geoip2_module.so';

/** A TCP port free on 127.0.0.1 now (nginx cannot be asked for port 0 and tell which it got). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export interface NginxOptions {
  /** Modules to load (paths of .so files). */
  modules?: string[];
  /** The folder nginx runs in (its prefix); default: `nginx` in the test's folder. */
  dir?: string;
}

/** The whole nginx.conf around `http` (the http block's content), for `nginx -t` or a run. */
export function writeNginxConf(dir: string, http: string, modules: string[] = []): string {
  mkdirSync(dir, { recursive: true });
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((k) => `  ${k}_temp_path ${path.join(dir, `${k}_temp`)};`).join('\n');
  const conf = path.join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `${modules.map((m) => `load_module ${m};`).join('\n')}
daemon off;
worker_processes 1;
pid ${path.join(dir, 'nginx.pid')};
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
${temp}
${http}
}
`,
  );
  return conf;
}

/** `nginx -t` on a configuration: its exit code and what it said. */
export function nginxTest(conf: string): { code: number | null; output: string } {
  const r = spawnSync(NGINX, ['-t', '-e', 'stderr', '-p', path.dirname(conf), '-c', conf], { encoding: 'utf8' });
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

export interface Nginx {
  /** What nginx wrote to stderr so far. */
  output(): string;
  stop(): Promise<void>;
}

/**
 * Starts nginx with `http` as its http block (which names the ports it
 * listens on; every port in `ports` must accept connections before this
 * resolves). Stopped at the end of the test.
 */
export async function startNginx(t: Test, http: string, ports: number[], options: NginxOptions = {}): Promise<Nginx> {
  const dir = options.dir ?? path.join(testDir(t), 'nginx');
  const conf = writeNginxConf(dir, http, options.modules);
  const child = spawn(NGINX, ['-e', 'stderr', '-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let stopped: Promise<void> | null = null;
  const nginx: Nginx = {
    output: () => output,
    stop() {
      stopped ??= (child.kill('SIGTERM'), exited);
      return stopped;
    },
  };
  t.teardown(() => nginx.stop());
  const connects = (port: number) =>
    new Promise<boolean>((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}:\n${output}`);
    if ((await Promise.all(ports.map(connects))).every(Boolean)) return nginx;
    if (Date.now() > deadline) throw new Error(`nginx did not listen on ${ports.join(', ')}:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
