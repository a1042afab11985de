/**
 * Files that hold secrets or customer data are for the user the server runs
 * as, nobody else: the account store (emails, password hashes, key digests,
 * sessions, usage: folder 0700, files 0600), the access log (0600) and the
 * admin token file. A copy of the store is enough for an offline attack on
 * the password hashes, so modes are set at creation (the umask can only take
 * bits away) and an older, looser file is tightened when opened, saying so.
 */
import { chmodSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { IprError } from './errors.js';

export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;
/** Group and other permission bits. */
const SHARED_BITS = 0o077;

/** What a tightened file is reported with. */
export type OnTightened = (message: string) => void;

/** The default report: a line on stderr, as the `ipr` commands write. */
export const tightenedToStderr: OnTightened = (message) => process.stderr.write(`ipr: ${message}\n`);

function octal(mode: number): string {
  return (mode & 0o777).toString(8).padStart(3, '0');
}

/** Sets `file`'s mode to `mode` when it grants anything to group or others; true when it did. */
function tighten(file: string, mode: number, report: OnTightened): boolean {
  const current = statSync(file).mode;
  if ((current & SHARED_BITS) === 0) return false;
  chmodSync(file, mode);
  report(`${file} was readable by others (mode ${octal(current)}): now ${octal(mode)}`);
  return true;
}

/** Makes `dir` (and its parents) when missing, 0700; an existing one is tightened to 0700. */
export function privateDir(dir: string, report: OnTightened): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  tighten(dir, PRIVATE_DIR_MODE, report);
}

/** Tightens every file of `dir` to 0600. */
export function privateFilesIn(dir: string, report: OnTightened): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isFile()) tighten(path.join(dir, entry.name), PRIVATE_FILE_MODE, report);
  }
}

/** Tightens `file` to 0600 when it exists. */
export function privateFile(file: string, report: OnTightened): void {
  try {
    tighten(file, PRIVATE_FILE_MODE, report);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

/**
 * Refuses a file holding a secret that group or others may read, as ssh
 * refuses such a private key: the secret may already have leaked, and
 * tightening it quietly would hide that. `what` names it in the message.
 */
export function refuseShared(file: string, what: string): void {
  const current = statSync(file).mode;
  if ((current & SHARED_BITS) !== 0) {
    throw new IprError('invalid_argument', `${what} ${file} is readable by others (mode ${octal(current)}): chmod 600 it`);
  }
}
