// Builds a snapshot in a process of its own and reports its time and peak memory:
//   node bench/build-trial.js SOURCES_FILE DATA_DIR
import { buildSnapshot } from '../dist/index.js';

const [sources, dataDir] = process.argv.slice(2);
const summary = await buildSnapshot({ sources, dataDir });
process.stdout.write(
  `${JSON.stringify({
    seconds: summary.seconds,
    peak_rss_bytes: process.resourceUsage().maxRSS * 1024,
    snapshot_bytes: summary.fileBytes,
    snapshot: summary.snapshot,
    intervals: summary.intervals,
    leaves: summary.leaves,
  })}\n`,
);
