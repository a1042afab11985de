/**
 * Shared by the tests: where the real data is, the full-dataset snapshot
 * built once per run (test/setup/build-fixtures.ts), and small snapshots built
 * from chosen sources in a test's own folder.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import { buildSnapshot, type BuildSummary } from '../src/index.js';
import { packageFile, sharedData } from '../bench/addresses.js';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** The built `ipr` command. */
export const cli = path.join(root, 'dist', 'cli', 'main.js');
export const feeds = path.join(sharedData, 'feeds');
export { packageFile, sharedData };

/** The data folder holding the snapshot of sources/feeds.sources.json (every real feed, ASN, DB-IP). */
export const fullDataDir = path.join(root, 'test', '.fixtures', 'full');

export interface SourceSpec {
  name: string;
  kind: string;
  format: string;
  path?: string;
  package?: string;
  company?: { name: string; type: string; domain?: string | null };
  trust?: number;
  max_age?: string;
  widen_ipv6?: number;
  dns_servers?: string[];
}

const testDirs = new WeakMap<Test, string>();

/** The test's own temporary folder (tap removes it afterwards). */
export function testDir(t: Test): string {
  let dir = testDirs.get(t);
  if (dir === undefined) {
    dir = t.testdir({}); // each call would empty it again: create it once
    testDirs.set(t, dir);
  }
  return dir;
}

/** Builds a snapshot from `sources` into a fresh data folder of the test; returns the folder and summary. */
export async function buildFrom(t: Test, sources: SourceSpec[], name = 'data'): Promise<{ dataDir: string; summary: BuildSummary }> {
  const dir = testDir(t);
  const sourcesFile = path.join(dir, `${name}.sources.json`);
  writeFileSync(sourcesFile, JSON.stringify({ sources }));
  const dataDir = path.join(dir, name);
  const summary = await buildSnapshot({ sources: sourcesFile, dataDir });
  return { dataDir, summary };
}

/** Writes `text` to a file in the test's folder and returns its path. */
export function fixtureFile(t: Test, name: string, text: string | Buffer): string {
  const file = path.join(testDir(t), name);
  writeFileSync(file, text);
  return file;
}

/**
 * Runs the `ipr` command in a child process without blocking this one (so a
 * feed server in the test can answer it); resolves its exit code and output.
 */
export function runIpr(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * The tables of a section of a Markdown document of the repository (from the
 * heading `heading`, exactly as written, to the next heading as high or
 * higher): each table its rows, each row its cells, without the header row.
 */
export function markdownTables(file: string, heading: string): string[][][] {
  const lines = readFileSync(path.join(root, file), 'utf8').split('\n');
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`${file} has no heading "${heading}"`);
  const level = heading.indexOf(' ');
  const tables: string[][][] = [];
  let table: string[][] | null = null;
  for (const line of lines.slice(start + 1)) {
    const hashes = /^(#+) /.exec(line)?.[1]?.length;
    if (hashes !== undefined && hashes <= level) break;
    if (!line.startsWith('|')) {
      table = null;
      continue;
    }
    if (table === null) {
      table = [];
      tables.push(table);
      continue; // the header row
    }
    if (/^\|[-| :]+\|$/.test(line)) continue; // the separator row
    table.push(line.slice(1, -1).split('|').map((cell) => cell.trim()));
  }
  return tables;
}
