// openapi.json passes Redocly's linter with its recommended rules
// (redocly.yaml): no error, no warning, and only the problems that
// .redocly.lint-ignore.yaml names and explains. The real @redocly/cli, run
// offline: telemetry is off in redocly.yaml and in the environment.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { root } from './helpers.js';

const redocly = path.join(root, 'node_modules', '@redocly', 'cli', 'bin', 'cli.js');

t.test('redocly lint openapi.json: no errors, no warnings', async (t) => {
  // A problem makes the command exit 1: its report is still what we read.
  const { stdout } = await promisify(execFile)(process.execPath, [redocly, 'lint', 'openapi.json', '--format=json', '--lint-config=error'], {
    cwd: root,
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
  }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }));
  const report = JSON.parse(stdout) as { totals: { errors: number; warnings: number; ignored: number }; problems: { ruleId: string; message: string }[] };
  t.same(
    report.problems.map((p) => `${p.ruleId}: ${p.message}`),
    [],
    'no problems',
  );
  t.same(report.totals, { errors: 0, warnings: 0, ignored: 2 }, 'the two GET operations without a 4xx are the only ones ignored');
});
