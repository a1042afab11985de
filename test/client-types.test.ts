// The typed client's types are the OpenAPI document's: src/client/types.ts
// is what the generator makes of the document (npm run openapi), so a change
// of the document without regenerating fails here; they also type-check
// against the server's own result types both ways (this file does not
// compile when they part). And the client is its own small module: nothing
// but its types file and the global fetch.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import type { CheckResult, ErrorBody } from 'ip-reputation/client';
import { type CheckResult as ServerCheckResult, type LookupError } from '../src/index.js';
import { loadPlans } from '../src/plans.js';
import { clientTypes, openapiDocument } from '../src/server/openapi.js';
import { root } from './helpers.js';

t.test('src/client/types.ts is generated from the OpenAPI document', async (t) => {
  t.equal(readFileSync(path.join(root, 'src', 'client', 'types.ts'), 'utf8'), clientTypes(openapiDocument(loadPlans())), 'run npm run openapi');
});

t.test("the client's types and the server's results are each other's", async (t) => {
  const toClient = (r: ServerCheckResult): CheckResult => r;
  const toServer = (r: CheckResult): ServerCheckResult => r;
  const errorToClient = (e: LookupError): ErrorBody => e;
  t.type(toClient, 'function');
  t.type(toServer, 'function');
  t.type(errorToClient, 'function');
});

t.test('ip-reputation/client loads nothing but itself', async (t) => {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  t.same(pkg.exports['./client'], { types: './dist/client/index.d.ts', default: './dist/client/index.js' });
  for (const file of ['index.js', 'types.js']) {
    const code = readFileSync(path.join(root, 'dist', 'client', file), 'utf8');
    const imports = [...code.matchAll(/^\s*(?:import|export)\b[^'"]*from\s*['"]([^'"]+)['"]/gm)].map((m) => m[1]);
    t.same(imports.filter((spec) => spec !== './types.js'), [], `${file} imports only the client's types`);
    t.notMatch(code, /\brequire\(|import\(/, `${file} loads nothing at run time`);
  }
});
