// The modules' layering, read from the imports of src/: no import circles,
// and no import that runs back up (the dashboard and the API hang off the
// request layer; the server mounts them; the command line sits on top).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { root } from './helpers.js';

const src = path.join(root, 'src');
const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => f.split(path.sep).join('/'));

/** Each module's imports of other modules of src/, as paths relative to src/ ("server/api.ts"). */
const imports = new Map(
  files.map((file) => {
    const text = readFileSync(path.join(src, file), 'utf8');
    const targets = [...text.matchAll(/^(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/gm)].map((m) =>
      path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1]!)).replace(/\.js$/, '.ts'),
    );
    return [file, targets];
  }),
);

/** The folder of a module ("" for the top of src/). */
const layerOf = (file: string) => (file.includes('/') ? file.slice(0, file.indexOf('/')) : '');

// What each folder may import, besides itself and the modules at the top of src/.
const MAY_IMPORT: Record<string, string[]> = {
  '': ['pipeline'], // index.ts exports the build
  pipeline: ['store'], // distribute.ts announces snapshots through the shared store's connection
  client: [], // shipped alone (ip-reputation/client): test/client-types.test.ts holds it to its own files
  store: [],
  http: [],
  dashboard: ['http', 'store'],
  server: ['http', 'store', 'dashboard', 'pipeline'],
  cli: ['pipeline', 'server', 'store'],
};

t.test('every import names a module of src/ that exists', async (t) => {
  const missing = [...imports].flatMap(([file, targets]) => targets.filter((target) => !imports.has(target)).map((target) => `${file} -> ${target}`));
  t.same(missing, []);
  t.ok(imports.size > 40, `${imports.size} modules read`);
});

t.test('no import runs back up a layer', async (t) => {
  t.same(Object.keys(MAY_IMPORT).sort(), [...new Set(files.map(layerOf))].sort(), 'every folder has its rule');
  const upward: string[] = [];
  for (const [file, targets] of imports) {
    const from = layerOf(file);
    for (const target of targets) {
      const to = layerOf(target);
      if (to !== from && to !== '' && !MAY_IMPORT[from]!.includes(to)) upward.push(`${file} -> ${target}`);
      // The top of src/ is below every folder but pipeline's index export.
      if (from === '' && to !== '' && !MAY_IMPORT['']!.includes(to)) upward.push(`${file} -> ${target}`);
    }
  }
  t.same(upward, []);
});

t.test('no import circles', async (t) => {
  const circles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const visit = (file: string, trail: string[]) => {
    if (state.get(file) === 'done') return;
    if (state.get(file) === 'open') {
      circles.push([...trail.slice(trail.indexOf(file)), file].join(' -> '));
      return;
    }
    state.set(file, 'open');
    for (const target of imports.get(file) ?? []) visit(target, [...trail, file]);
    state.set(file, 'done');
  };
  for (const file of imports.keys()) visit(file, []);
  t.same(circles, []);
});
