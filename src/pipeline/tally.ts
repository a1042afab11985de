/**
 * Per-source accounting of records and bad lines, and the rules that fail a
 * build: a source with no records, or with more than 1% bad lines.
 */
import { IprError } from '../errors.js';

export interface BadLine {
  line: number;
  text: string;
  reason: string;
}

/** Bad lines kept per source to show; the rest are only counted. */
const SAMPLES = 10;
export const MAX_BAD_RATIO = 0.01;

export class Tally {
  records = 0;
  bad = 0;
  /** Host names that did not resolve (surfshark-clusters): records whose addresses are left out. */
  unresolved = 0;
  readonly samples: BadLine[] = [];

  constructor(
    readonly source: string,
    readonly file: string,
  ) {}

  badLine(line: number, text: string, reason: string): void {
    this.bad++;
    if (this.samples.length < SAMPLES) this.samples.push({ line, text: text.slice(0, 120), reason });
  }

  /** `file:line: reason: text` for each kept sample. */
  describeSamples(): string[] {
    return this.samples.map((s) => `${this.file}:${s.line}: ${s.reason}: ${JSON.stringify(s.text)}`);
  }

  /** Throws when the source cannot be used. */
  check(): void {
    if (this.records === 0) {
      throw new IprError('source_empty', `source ${this.source}: ${this.file} has no records${this.bad ? ` (${this.bad} bad lines)` : ''}`);
    }
    const ratio = this.bad / (this.records + this.bad);
    if (ratio > MAX_BAD_RATIO) {
      throw new IprError(
        'source_bad_lines',
        `source ${this.source}: ${this.bad} of ${this.records + this.bad} lines of ${this.file} are bad ` +
          `(${(ratio * 100).toFixed(1)}%, more than ${MAX_BAD_RATIO * 100}%):\n  ${this.describeSamples().join('\n  ')}`,
      );
    }
  }
}
