/**
 * What every command shares: its options parsed strictly, and the usage error
 * that makes `ipr` print the help and exit 2.
 */
import { parseArgs } from 'node:util';

/** A command line that does not fit a command: exit code 2 with the help. */
export class UsageError extends Error {}

/** One command group of `ipr`: its name, its lines of the help, and what runs it (resolving to the exit code). */
export interface Command {
  name: string;
  usage: string;
  run(args: string[]): Promise<number>;
}

type OptionSpec = Record<string, { type: 'string' | 'boolean' }>;
/** The values of the options `T` declares, and --data. */
type Values<T extends OptionSpec> = { [K in keyof T]?: T[K]['type'] extends 'boolean' ? boolean : string } & { data?: string };

/** Parses `args` with `spec` and the `--data DIR` every command takes; an unknown option is a usage error. */
export function options<T extends OptionSpec>(args: string[], spec: T, positionals = false): { values: Values<T>; positionals: string[] } {
  try {
    const parsed = parseArgs({ args, options: { data: { type: 'string' }, ...spec }, allowPositionals: positionals, strict: true });
    return { values: parsed.values as Values<T>, positionals: parsed.positionals };
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** The data folder of a command: --data, else ./data. */
export function dataDirOf(values: { data?: string | undefined }): string {
  return values.data ?? 'data';
}

/** `--store URL`, taken by every command that touches customers. */
export const STORE_OPTION = { store: { type: 'string' } } as const;

/** The customer store of a command: --store, else IPR_STORE (empty: none); neither: the data folder's. */
export function storeUrlOf(values: { store?: string | undefined }): string | undefined {
  return values.store ?? (process.env.IPR_STORE || undefined);
}

export function integerOption(value: string | undefined, name: string, fallback: number | undefined, min = 0): number | undefined {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!(Number.isInteger(n) && n >= min)) throw new UsageError(`${name} takes a whole number from ${min}`);
  return n;
}

/** A comma-separated option ("a,b,c"); absent or empty: none. */
export function listOption(value: string | undefined): string[] {
  return value === undefined || value.trim() === '' ? [] : value.split(',').map((s) => s.trim());
}

/** --keep N, as the build, update and serve options take it. */
export function keepOption(value: string | undefined): { keep?: number } {
  const keep = integerOption(value, '--keep', undefined);
  return keep === undefined ? {} : { keep };
}
