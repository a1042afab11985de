// Exports a data folder's snapshot as a MaxMind DB in a process of its own
// and reports its time and peak memory:
//   node bench/export-trial.js DATA_DIR OUT_FILE
import { exportMmdb } from '../dist/pipeline/mmdb-export.js';

const [dataDir, out] = process.argv.slice(2);
const s = exportMmdb({ dataDir, out });
process.stdout.write(
  `${JSON.stringify({
    seconds: s.seconds,
    peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
    file_bytes: s.bytes,
    data_bytes: s.dataBytes,
    node_count: s.nodeCount,
    record_size: s.recordSize,
    answers: s.answers,
    prefixes: s.prefixes,
  })}\n`,
);
