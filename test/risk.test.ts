// Risk score and recommendation (docs/API.md "Risk score"): additive points, capped,
// thresholds, from the configuration file; and every lookup follows them.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { loadRiskConfig, openSnapshot, riskTable } from '../src/index.js';
import { seededAddresses } from '../bench/addresses.js';
import { fullDataDir, testDir } from './helpers.js';

const TOR = 1, VPN = 2, PROXY = 4, RELAY = 8, HOSTING = 16;

t.test('the defaults of docs/API.md', async (t) => {
  const table = riskTable(loadRiskConfig());
  const cases: [number, number, string][] = [
    [0, 0, 'allow'],
    [HOSTING, 30, 'allow'],
    [RELAY, 40, 'verify'],
    [PROXY, 50, 'verify'],
    [VPN, 60, 'verify'],
    [RELAY | HOSTING, 70, 'block'],
    [TOR, 80, 'block'],
    [VPN | HOSTING, 90, 'block'], // docs/API.md's example
    [TOR | VPN | PROXY | RELAY | HOSTING, 100, 'block'], // 260, capped
  ];
  for (const [flags, score, recommendation] of cases) t.same(table[flags], { score, recommendation }, `flags ${flags}`);
});

t.test('weights and thresholds come from the file; bad files are refused', async (t) => {
  const dir = testDir(t);
  const file = path.join(dir, 'risk.json');
  writeFileSync(file, JSON.stringify({ points: { is_tor: 39, is_vpn: 40, is_proxy: 69, is_relay: 70, is_hosting: 1 }, cap: 95, verify_from: 40, block_from: 70 }));
  const table = riskTable(loadRiskConfig(file));
  t.same(table[TOR], { score: 39, recommendation: 'allow' });
  t.same(table[VPN], { score: 40, recommendation: 'verify' });
  t.same(table[PROXY], { score: 69, recommendation: 'verify' });
  t.same(table[RELAY], { score: 70, recommendation: 'block' });
  t.same(table[TOR | VPN | PROXY], { score: 95, recommendation: 'block' });
  writeFileSync(file, JSON.stringify({ points: { is_tor: 80 }, cap: 100, verify_from: 40, block_from: 70 }));
  t.throws(() => loadRiskConfig(file), { code: 'invalid_argument', message: /needs integer points/ });
  writeFileSync(file, '{');
  t.throws(() => loadRiskConfig(file), { code: 'invalid_argument', message: /risk\.json/ });
});

t.test('every answer follows the table', async (t) => {
  const s = openSnapshot(fullDataDir);
  t.teardown(() => s.close());
  const table = riskTable(loadRiskConfig());
  let wrong = 0;
  for (const r of s.lookupMany(seededAddresses(20_000, 3))) {
    if ('error' in r) continue;
    const flags = (r.is_tor ? TOR : 0) | (r.is_vpn ? VPN : 0) | (r.is_proxy ? PROXY : 0) | (r.is_relay ? RELAY : 0) | (r.is_hosting ? HOSTING : 0);
    if (r.risk_score !== table[flags]!.score || r.recommendation !== table[flags]!.recommendation) wrong++;
  }
  t.equal(wrong, 0);
});
