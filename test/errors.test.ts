// The one error registry (src/errors.ts) against every other place that
// names error codes, as fastify's test/internals/errors.test.js holds its
// registry to its types and docs: the native addon, the TypeScript that
// raises them, the OpenAPI document's responses and docs/API.md's tables. A code added, renamed or
// dropped on one side only fails here. (That every code raised in TypeScript
// is a registry key, the compiler checks: IprError and errorBody take an
// ErrorCode.)
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { API_ERROR_CODES, ERROR_CODES, IprError, type ErrorCode } from '../src/errors.js';
import { native } from '../src/native.js';
import { loadPlans } from '../src/plans.js';
import { openapiDocument } from '../src/server/openapi.js';
import { markdownTables, root, testDir } from './helpers.js';

const registry = Object.keys(ERROR_CODES);

function filesUnder(dir: string, extensions: RegExp): string[] {
  return readdirSync(path.join(root, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => extensions.test(f))
    .map((f) => path.join(dir, f));
}

t.test('the addon throws registry codes, and only them', async (t) => {
  t.same(
    native.errorCodes.filter((code) => !registry.includes(code)),
    [],
    'every code of native/src/error_codes.h is in the registry',
  );
  t.equal(new Set(native.errorCodes).size, native.errorCodes.length, 'no code twice');
  t.ok(native.errorCodes.includes('snapshot_invalid'), 'the list is the real one');
});

t.test('the native sources name codes only through error_codes.h', async (t) => {
  const bare: string[] = [];
  for (const file of [...filesUnder('native/src', /\.(cc|h)$/), ...filesUnder('native/fuzz', /\.cc$/), ...filesUnder('native/bench', /\.cc$/)]) {
    if (file.endsWith('error_codes.h')) continue;
    const text = readFileSync(path.join(root, file), 'utf8');
    for (const [, literal] of text.matchAll(/"([a-z]+(?:_[a-z]+)+)"/g)) if (registry.includes(literal!)) bare.push(`${file}: "${literal}"`);
  }
  t.same(bare, [], 'no code as a bare string');
});

t.test("the addon's errors are IprErrors with the code's name", async (t) => {
  // The snapshot codes come out of real damaged and missing snapshots in
  // bad-input.test.ts and faults-server.test.ts; the writer's two here.
  const table = 99;
  t.throws(() => new native.SnapshotWriter().add(table as never, 4, new Uint8Array(4), new Uint8Array(4), new Uint32Array(1), new Uint16Array(1), 1), {
    constructor: IprError,
    code: 'invalid_argument',
    message: 'snapshot writer: unknown table',
  });
  const file = path.join(testDir(t), 'taken.mdb');
  const first = new native.SnapshotWriter();
  first.compile();
  first.write(file, '{}', 0);
  const second = new native.SnapshotWriter();
  second.compile();
  t.throws(() => second.write(file, '{}', 0), { constructor: IprError, code: 'write_failed', message: `snapshot ${file}: already exists` });
});

t.test('every code of the registry is raised somewhere', async (t) => {
  const raised = new Set<string>(native.errorCodes);
  for (const file of filesUnder('src', /\.ts$/)) {
    if (file === path.join('src', 'errors.ts')) continue;
    for (const [, literal] of readFileSync(path.join(root, file), 'utf8').matchAll(/'([a-z]+(?:_[a-z]+)*)'/g)) raised.add(literal!);
  }
  t.same(
    registry.filter((code) => !raised.has(code)),
    [],
    'no code in the registry that nothing raises',
  );
});

t.test('docs/API.md lists every code of the registry once, with its status and messages', async (t) => {
  const sections = ['### Codes of the API', '### Codes of the dashboard', '### Codes of the library and the command line'];
  const listed = sections.map((heading) => {
    const [table, ...others] = markdownTables('docs/API.md', heading);
    t.equal(others.length, 0, `${heading}: one table`);
    return table!.map(([status, code, message]) => ({ status: Number(status), code: code!.replace(/`/g, ''), messages: [...message!.matchAll(/"([^"]*)"/g)].map((m) => m[1]) }));
  });
  const all = listed.flat();
  t.same(all.map((row) => row.code).sort(), [...registry].sort(), 'the codes of the three tables are the registry');
  for (const row of all) {
    const entry = ERROR_CODES[row.code as ErrorCode];
    if (entry === undefined) continue;
    const messages = 'perSecondMessage' in entry ? [entry.message, entry.perSecondMessage] : [entry.message];
    t.same({ status: row.status, messages: row.messages }, { status: entry.status, messages }, row.code);
  }
  t.same(listed[0]!.map((row) => row.code), [...API_ERROR_CODES], "the API's table is API_ERROR_CODES");
});

t.test('the OpenAPI document answers with the API codes, and only them', async (t) => {
  const document = openapiDocument(loadPlans()) as any;
  const codes = new Set<string>(Object.keys(document['x-other-answers'].codes));
  // The codes each response allows: the enum or const of its `error` property,
  // through $refs but for the Error schema's own list of every code.
  const resolve = (ref: string) => ref.slice(2).split('/').reduce((node, part) => node[part], document);
  const collect = (value: unknown, key: string | null): void => {
    if (Array.isArray(value)) return value.forEach((v) => collect(v, null));
    if (value === null || typeof value !== 'object') return;
    const node = value as Record<string, unknown>;
    if (key === 'error') [node.enum ?? node.const].flat().forEach((code) => code !== undefined && codes.add(code as string));
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && v !== '#/components/schemas/Error') collect(resolve(v as string), null);
      else collect(v, k);
    }
  };
  for (const operations of Object.values<any>(document.paths)) for (const operation of Object.values<any>(operations)) collect(operation.responses, null);
  t.same([...codes].sort(), [...API_ERROR_CODES].sort());
});
