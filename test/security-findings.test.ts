// The findings of the outside review (issue 13), each as the attack that
// worked against a real server before its fix and no longer does. What each
// fix is and why: docs/RELIABILITY.md, "Outside review".
import t from 'tap';
import { request, startServer } from './server.js';

t.test('finding 11: /dashboard/__proto__ and /dashboard/constructor are unknown pages', async (t) => {
  const server = await startServer(t, { workers: 1 });
  for (const page of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
    const r = await request(server.port, `/dashboard/${page}`, { method: 'GET' });
    t.same([r.status, r.headers['content-type'], r.headers.location], [404, 'text/html; charset=utf-8', undefined], `/dashboard/${page}: 404, as any unknown path`);
  }
});
