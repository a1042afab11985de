/**
 * Address ranges on their way to the native writer: parsed with the same
 * strict parser as lookups, batched per table and family, and handed over in
 * typed arrays (one native call per batch, not per range).
 */
import { IprError } from '../errors.js';
import { compareAddresses, type Family } from '../address.js';
import type { NativeSnapshotWriter } from '../native.js';

const BATCH = 16384;

class Batch {
  readonly starts: Uint8Array;
  readonly ends: Uint8Array;
  readonly values = new Uint32Array(BATCH);
  readonly sources = new Uint16Array(BATCH);
  count = 0;
  constructor(readonly width: number) {
    this.starts = new Uint8Array(BATCH * width);
    this.ends = new Uint8Array(BATCH * width);
  }
}

/** Where importers put what they read: the native writer's tables (RangeSink), or weak listings (trust.ts). */
export interface TableSink {
  addPrefix(table: number, family: Family, bytes: Uint8Array, len: number, value: number): void;
  addRange(table: number, family: Family, first: Uint8Array, last: Uint8Array, value: number): void;
}

export class RangeSink implements TableSink {
  readonly #writer: Pick<NativeSnapshotWriter, 'add'>;
  readonly #batches = new Map<number, Batch>();
  /** The source (its index in the configuration) the ranges added now come from: their evidence. */
  source = 0;

  constructor(writer: Pick<NativeSnapshotWriter, 'add'>) {
    this.#writer = writer;
  }

  /** Adds the prefix `len` bits long of `bytes` (host bits are cleared). */
  addPrefix(table: number, family: Family, bytes: Uint8Array, len: number, value: number): void {
    const batch = this.#batch(table, family);
    const width = batch.width;
    const at = batch.count * width;
    for (let i = 0; i < width; i++) {
      const bitsHere = Math.min(8, Math.max(0, len - 8 * i));
      const keep = (0xff << (8 - bitsHere)) & 0xff;
      batch.starts[at + i] = bytes[i]! & keep;
      batch.ends[at + i] = (bytes[i]! & keep) | (~keep & 0xff);
    }
    this.#push(table, family, batch, value);
  }

  /** Adds first..last (inclusive); throws when last < first. */
  addRange(table: number, family: Family, first: Uint8Array, last: Uint8Array, value: number): void {
    const batch = this.#batch(table, family);
    const width = batch.width;
    if (compareAddresses(first, last, width) > 0) throw new IprError('invalid_argument', 'range ends before it starts');
    batch.starts.set(first.subarray(0, width), batch.count * width);
    batch.ends.set(last.subarray(0, width), batch.count * width);
    this.#push(table, family, batch, value);
  }

  flush(): void {
    for (const [key, batch] of this.#batches) this.#send(key >> 1, key & 1 ? 6 : 4, batch);
  }

  #batch(table: number, family: Family): Batch {
    const key = table * 2 + (family === 6 ? 1 : 0);
    let batch = this.#batches.get(key);
    if (batch === undefined) {
      batch = new Batch(family === 4 ? 4 : 16);
      this.#batches.set(key, batch);
    }
    return batch;
  }

  #push(table: number, family: Family, batch: Batch, value: number): void {
    batch.sources[batch.count] = this.source;
    batch.values[batch.count++] = value;
    if (batch.count === BATCH) this.#send(table, family, batch);
  }

  #send(table: number, family: Family, batch: Batch): void {
    if (batch.count === 0) return;
    this.#writer.add(table, family, batch.starts, batch.ends, batch.values, batch.sources, batch.count);
    batch.count = 0;
  }
}
