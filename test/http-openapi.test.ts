// The OpenAPI document: the committed openapi.json is what the code
// generates, it lists every code the API answers with, and real responses of
// a running server validate against it (status, body schema, headers).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import Ajv2020 from 'ajv/dist/2020.js';
import t from 'tap';
import { API_ERROR_CODES } from '../src/errors.js';
import { openapiDocument } from '../src/server/openapi.js';
import { loadPlans } from '../src/plans.js';
import { root } from './helpers.js';
import { accountStore, accountWithKey, check, request, startServer, type Reply } from './server.js';

const generated = openapiDocument(loadPlans()) as any;

t.test('openapi.json in the repository is the generated document (npm run openapi)', async (t) => {
  t.same(JSON.parse(readFileSync(path.join(root, 'openapi.json'), 'utf8')), generated);
});

t.test('the document lists every code the API answers with', async (t) => {
  const text = JSON.stringify(generated);
  for (const code of API_ERROR_CODES) t.ok(text.includes(`"${code}"`), code);
  t.same(generated.components.schemas.Error.properties.error.enum, [...API_ERROR_CODES]);
});

t.test('real responses validate against the document', async (t) => {
  const ajv = new Ajv2020.default({ strict: false, allErrors: true });
  ajv.addSchema(generated, 'openapi.json');
  const validate = (method: string, apiPath: string, reply: Reply) => {
    const operation = generated.paths[apiPath][method];
    const documented = operation.responses[String(reply.status)];
    t.ok(documented, `${method.toUpperCase()} ${apiPath} ${reply.status} is documented`);
    if (!documented) return;
    const pointer = `openapi.json#/paths/${apiPath.replace(/\//g, '~1')}/${method}/responses/${reply.status}/content/application~1json/schema`;
    const valid = ajv.validate({ $ref: pointer }, reply.json);
    t.ok(valid, `${method.toUpperCase()} ${apiPath} ${reply.status} body: ${ajv.errorsText()}`);
    for (const [name, header] of Object.entries<any>(documented.headers ?? {})) {
      t.ok(reply.headers[name.toLowerCase()] !== undefined, `${reply.status} carries ${name}`);
      const schema = header.$ref ? generated.components.headers[header.$ref.split('/').pop()].schema : header.schema;
      if (schema.type === 'integer') t.match(reply.headers[name.toLowerCase()], /^[0-9]+$/, `${name} is an integer`);
    }
  };

  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'doc@example.com', 'free');
  const suspended = await accountWithKey(store, 'sus@example.com', 'pro');
  store.setStatus('sus@example.com', 'suspended');
  const enterprise = await accountWithKey(store, 'ent@example.com', 'enterprise');

  validate('post', '/check', await check(server.port, key, { ip: '8.8.8.8' }));
  await new Promise((resolve) => setTimeout(resolve, 1100));
  validate('post', '/check', await check(server.port, key, { ip: 'nope' }));
  validate('post', '/check', await check(server.port, key, { ip: '8.8.8.8' })); // 429 per second
  validate('post', '/check', await check(server.port, 'ipr_unknownunknownunknown', { ip: '8.8.8.8' }));
  validate('post', '/check', await check(server.port, suspended, { ip: '8.8.8.8' }));
  for (const [body, headers] of [
    ['{}', {}],
    ['[]', {}],
    ['{"ip":"8.8.8.8"}', { 'content-type': 'text/plain' }],
    [JSON.stringify({ ip: '8.8.8.8', pad: 'x'.repeat(9000) }), {}],
    ['{"ip":"2001:db8::1"}', {}],
    ['{"ip":"10.1.2.3"}', {}],
    ['{"ip":"104.28.28.76"}', {}],
  ] as const) {
    validate('post', '/check', await check(server.port, enterprise, body, { headers }));
  }
  const explained = await request(server.port, '/v1/check?explain=1', {
    headers: { authorization: `Bearer ${enterprise}`, 'content-type': 'application/json' },
    body: '{"ip":"2.56.17.1"}',
  });
  t.ok(explained.json.evidence.length > 0, 'an answer with evidence');
  validate('post', '/check', explained);
  const batch = await request(server.port, '/v1/check/batch', {
    headers: { authorization: `Bearer ${enterprise}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ips: ['8.8.8.8', 'x', '2620:7:6003::141'] }),
  });
  validate('post', '/check/batch', batch);
  validate(
    'post',
    '/check/batch',
    await request(server.port, '/v1/check/batch', { headers: { authorization: `Bearer ${enterprise}`, 'content-type': 'application/json' }, body: '{"ips":[]}' }),
  );
  validate('get', '/health', await request(server.port, '/v1/health', { method: 'GET' }));
  validate('get', '/openapi.json', await request(server.port, '/v1/openapi.json', { method: 'GET' }));
});
