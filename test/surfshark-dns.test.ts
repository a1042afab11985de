// Surfshark's clusters name host names, resolved by DNS when the snapshot is
// built (src/pipeline/dns.ts): against a real DNS server (dnsmasq on a
// loopback port, answering for two of the three clusters of the real API
// response), and with DNS unreachable (a closed port): the build goes on,
// warns, and leaves the servers out.
import { spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { buildSnapshot, openSnapshot } from '../src/index.js';
import { feeds, fixtureFile, testDir } from './helpers.js';

const DNSMASQ = '/usr/sbin/dnsmasq';
const clusters = path.join(feeds, 'vpn-providers', 'api-samples', 'surfshark.json');
// Two Surfshark servers of vpn-providers/surfshark.txt, as the addresses of two clusters.
const AL_TIA = '37.19.195.87';
const DZ_ALG = '37.19.200.114';

/** A UDP port on 127.0.0.1 that nothing listens on now. */
async function freeUdpPort(): Promise<number> {
  const socket = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}

async function build(t: Parameters<typeof testDir>[0], dnsServers: string[], name: string) {
  const warnings: string[] = [];
  const sources = fixtureFile(t, `${name}.sources.json`, JSON.stringify({
    sources: [{ name: 'surfshark', kind: 'vpn', format: 'surfshark-clusters', path: clusters, dns_servers: dnsServers }],
  }));
  const dataDir = path.join(testDir(t), name);
  const summary = await buildSnapshot({ sources, dataDir, onWarning: (w) => warnings.push(w) });
  const snapshot = openSnapshot(dataDir);
  t.teardown(() => snapshot.close());
  return { summary, warnings, snapshot };
}

t.test('host names resolved by a real DNS server; a name it does not know is left out with a warning', async (t) => {
  t.ok(existsSync(DNSMASQ), `${DNSMASQ} exists (apt-get install dnsmasq-base; .ci/run does)`);
  const port = await freeUdpPort();
  const dnsmasq = spawn(
    DNSMASQ,
    [
      '--keep-in-foreground', '--conf-file=/dev/null', '--pid-file=', `--port=${port}`, '--listen-address=127.0.0.1',
      '--bind-interfaces', '--no-resolv', '--no-hosts', '--local=/surfshark.com/', '--log-facility=-',
      `--host-record=al-tia.prod.surfshark.com,${AL_TIA}`, `--host-record=dz-alg.prod.surfshark.com,${DZ_ALG}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  t.teardown(() => dnsmasq.kill());
  let log = '';
  await new Promise<void>((resolve, reject) => {
    const ready = (chunk: Buffer) => {
      log += chunk;
      if (log.includes('cleared cache') || log.includes('started')) resolve();
    };
    dnsmasq.stderr.on('data', ready);
    dnsmasq.stdout.on('data', ready);
    dnsmasq.once('exit', (code) => reject(new Error(`dnsmasq exited (${code}): ${log}`)));
  });

  const { summary, warnings, snapshot } = await build(t, [`127.0.0.1:${port}`], 'resolved');
  t.match(summary.sources[0], { records: 3, bad_lines: 0, unresolved: 1 });
  t.same(warnings, [
    'source surfshark: 1 of 3 host names not resolved (unknown to DNS, e.g. vn-hcm.prod.surfshark.com); their servers are left out of this snapshot',
  ]);
  t.same(snapshot.lookup(AL_TIA).company, { name: 'Surfshark', type: 'vpn', domain: 'surfshark.com' });
  t.equal(snapshot.lookup(DZ_ALG).is_vpn, true);
  t.same(snapshot.explain(DZ_ALG).evidence, [{ table: 'vpn', source: 'surfshark', prefix: `${DZ_ALG}/32` }]);
});

t.test('DNS unreachable: every name is left out with a warning, and the build goes on', async (t) => {
  const closed = `127.0.0.1:${await freeUdpPort()}`;
  const { summary, warnings, snapshot } = await build(t, [closed], 'unreachable');
  t.match(summary.sources[0], { records: 3, bad_lines: 0, unresolved: 3 });
  t.same(warnings, [
    `source surfshark: 3 of 3 host names not resolved (DNS unreachable: ECONNREFUSED asking ${closed}); their servers are left out of this snapshot`,
  ]);
  t.equal(snapshot.lookup(AL_TIA).is_vpn, false);
});
