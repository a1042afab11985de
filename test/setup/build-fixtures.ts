// Runs once before the test files (package.json "tap.before"): builds the
// full real-data snapshot that most tests read, so each does not rebuild it.
import { rmSync } from 'node:fs';
import path from 'node:path';
import { buildSnapshot } from '../../src/index.js';
import { fullDataDir, root } from '../helpers.js';

rmSync(fullDataDir, { recursive: true, force: true });
const summary = await buildSnapshot({ sources: path.join(root, 'sources', 'feeds.sources.json'), dataDir: fullDataDir });
console.log(`# fixture: full snapshot built in ${summary.seconds.toFixed(1)} s (${(summary.fileBytes / 2 ** 20).toFixed(0)} MiB)`);
