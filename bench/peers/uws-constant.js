// Peer (b) of the HTTP benchmark: the ceiling of this design. A bare
// uWebSockets.js app on the same port in N worker threads (as `ipr serve`
// runs), which reads the POST body of /v1/check and answers one constant
// check result: no auth, no limits, no lookup.
//   node bench/peers/uws-constant.js PORT WORKERS
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { createRequire } from 'node:module';

const BODY = JSON.stringify({
  ip: '8.8.8.8',
  is_vpn: false,
  is_proxy: false,
  is_tor: false,
  is_relay: false,
  is_hosting: true,
  risk_score: 30,
  recommendation: 'allow',
  company: { name: 'Google LLC', type: 'hosting', domain: null },
  location: { country: 'US', country_name: 'United States', city: 'Mountain View', region: 'California', latitude: 37.4056, longitude: -122.0775 },
  asn: { number: 15169, name: 'Google LLC', route: '8.8.8.0/24' },
});

if (isMainThread) {
  const [port, workers] = process.argv.slice(2).map(Number);
  let listening = 0;
  for (let i = 0; i < workers; i++) {
    new Worker(new URL(import.meta.url), { workerData: { port } }).on('message', () => {
      if (++listening === workers) console.log(`listening ${port}`);
    });
  }
} else {
  const uws = createRequire(import.meta.url)('uWebSockets.js');
  uws
    .App()
    .post('/v1/check', (res) => {
      let aborted = false;
      res.onAborted(() => (aborted = true));
      res.onData((_chunk, isLast) => {
        if (!isLast || aborted) return;
        res.cork(() => res.writeStatus('200 OK').writeHeader('Content-Type', 'application/json; charset=utf-8').end(BODY));
      });
    })
    .listen('127.0.0.1', workerData.port, (token) => {
      if (!token) throw new Error(`cannot listen on ${workerData.port}`);
      parentPort.postMessage('listening');
    });
}
