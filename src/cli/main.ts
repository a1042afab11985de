#!/usr/bin/env node
/**
 * `ipr`: the operator's command line. Each command group lives in its own
 * file of this folder; `ipr help` lists them. Exit codes: 0 success, 1 an
 * operator error (IprError: its message names the file or the thing), 2 a
 * usage error.
 */
import { IprError } from '../errors.js';
import { UsageError, type Command } from './args.js';
import { customerCommands } from './accounts.js';
import { serveCommands } from './serve.js';
import { snapshotCommands } from './snapshots.js';

const COMMANDS: Command[] = [...snapshotCommands, ...serveCommands, ...customerCommands];

const USAGE = `usage: ipr <command> [options]

${COMMANDS.map((c) => `  ${c.usage}`).join('\n')}

  --data DIR defaults to ./data.
  --store URL (or IPR_STORE) on serve, start, update and the accounts and keys commands: the
  customers of that Redis store (redis://..., rediss://..., redis+cluster://...) instead of the
  data folder's.`;

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === 'help' || name === '--help' || name === '-h') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  try {
    const command = COMMANDS.find((c) => c.name === name);
    if (command === undefined) throw new UsageError(name === undefined ? 'no command given' : `unknown command "${name}"`);
    return await command.run(rest);
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`ipr: ${error.message}\n${USAGE}\n`);
      return 2;
    }
    if (error instanceof IprError) {
      process.stderr.write(`ipr: ${error.message}\n`);
      return 1;
    }
    throw error;
  }
}

process.exitCode = await main(process.argv.slice(2));
