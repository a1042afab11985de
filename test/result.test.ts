// The check result is defined once, in src/result.ts; what is not made from
// it is held to it here: the addon's table order, and the field order of the
// records the pipeline writes and lookup() answers, on the full real-data
// snapshot, and the field tables of docs/API.md. (The JSON the addon writes for servers is held to lookup()'s
// objects in test/differential.test.ts.)
import t from 'tap';
import { seededAddresses } from '../bench/addresses.js';
import { openSnapshot } from '../src/index.js';
import { native } from '../src/native.js';
import {
  ASN_FIELDS,
  CHECK_RESULT_FIELDS,
  COMPANY_FIELDS,
  COMPANY_TYPES,
  FLAG_BIT,
  FLAG_TABLES,
  LOCATION_FIELDS,
  resultTemplate,
  TABLES,
} from '../src/result.js';
import { fullDataDir, markdownTables } from './helpers.js';

t.test("the addon's tables are TABLES, in order", async (t) => {
  t.same(native.tables, [...TABLES]);
  t.same(TABLES.slice(0, FLAG_TABLES.length), [...FLAG_TABLES], 'the flag tables first');
});

t.test('the flags of a check result are the flag tables, one bit each', async (t) => {
  t.same(
    Object.keys(CHECK_RESULT_FIELDS).filter((name) => name.startsWith('is_')).sort(),
    FLAG_TABLES.map((flag) => `is_${flag}`).sort(),
  );
  const all = (1 << FLAG_TABLES.length) - 1;
  t.equal(Object.values(FLAG_BIT).reduce((bits, bit) => bits | bit, 0), all, 'the bits of the flags cover the flag combinations');
  for (const flag of FLAG_TABLES) {
    const only = resultTemplate(FLAG_BIT[flag], 0, 'allow');
    t.same(
      FLAG_TABLES.filter((f) => only[`is_${f}`]),
      [flag],
      `bit ${FLAG_BIT[flag]} sets is_${flag} alone`,
    );
  }
});

t.test('answers on real data have the fields of the definition, in its order, at every level', async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const order = {
    result: Object.keys(CHECK_RESULT_FIELDS).join(),
    company: Object.keys(COMPANY_FIELDS).join(),
    location: Object.keys(LOCATION_FIELDS).join(),
    asn: Object.keys(ASN_FIELDS).join(),
  };
  const seen = { result: new Set<string>(), company: new Set<string>(), location: new Set<string>(), asn: new Set<string>() };
  const types = new Set<string>();
  // Provider companies (cloud ranges), ASN companies, and special-purpose space among them.
  const addresses = [...seededAddresses(20_000, 99), '8.8.8.8', '3.5.140.2', '2600:1f18::1', '10.1.2.3'];
  for (const result of snapshot.lookupMany(addresses)) {
    if ('error' in result) continue;
    seen.result.add(Object.keys(result).join());
    if (result.company) {
      seen.company.add(Object.keys(result.company).join());
      types.add(result.company.type);
    }
    if (result.location) seen.location.add(Object.keys(result.location).join());
    if (result.asn) seen.asn.add(Object.keys(result.asn).join());
  }
  for (const level of ['result', 'company', 'location', 'asn'] as const) t.same([...seen[level]], [order[level]], level);
  t.same(
    [...types].filter((type) => !(COMPANY_TYPES as readonly string[]).includes(type)),
    [],
    `company types ${[...types].sort().join(', ')} are all COMPANY_TYPES`,
  );
});

t.test('docs/API.md lists the fields of the definition, in its order', async (t) => {
  const [result, company, location, asn, ...others] = markdownTables('docs/API.md', '## The check result');
  t.equal(others.length, 0, 'four field tables');
  const names = (table: string[][] | undefined) => (table ?? []).map(([cell]) => cell!.replace(/`/g, ''));
  t.same(names(result), Object.keys(CHECK_RESULT_FIELDS), 'the check result');
  t.same(names(company), Object.keys(COMPANY_FIELDS), 'company');
  t.same(names(location), Object.keys(LOCATION_FIELDS), 'location');
  t.same(names(asn), Object.keys(ASN_FIELDS), 'asn');
  const typeRow = company!.find(([cell]) => cell === '`type`')!;
  t.same([...typeRow[2]!.matchAll(/`([a-z]+)`/g)].map((m) => m[1]), [...COMPANY_TYPES], 'the company types');
});
