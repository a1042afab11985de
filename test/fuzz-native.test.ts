// The libFuzzer targets of native/fuzz/ (clang, ASan, UBSan), each run for a
// bounded time: first their committed corpus, which holds the regression
// inputs of the bugs they found, then new mutations. Any crash, sanitizer
// report, broken property, leak or hang fails with the reproducer's path.
// FUZZ_SECONDS sets the time per target (default 60).
import t from 'tap';
import { buildTargets, missingToolchain, runTarget, seedSnapshot, targets } from '../native/fuzz/run.js';

const seconds = Number(process.env.FUZZ_SECONDS ?? 60);
const missing = missingToolchain();

// Without clang the targets cannot be built. CI installs it (.ci/run) and sets
// IPR_FUZZ_REQUIRED so that a missing toolchain fails there instead of skipping.
t.test('native fuzz targets', { skip: missing !== null && process.env.IPR_FUZZ_REQUIRED !== '1' ? missing : false }, async (t) => {
  t.equal(missing, null, 'clang with libFuzzer is installed');
  buildTargets();
  const snapshotFile = await seedSnapshot();
  for (const target of targets) {
    const result = await runTarget(target, seconds, snapshotFile);
    t.comment(`fuzz_${target}: ${result.execs} execs in ${result.seconds.toFixed(0)} s, corpus ${result.corpus}`);
    t.equal(result.crash, null, result.crash === null ? `fuzz_${target} found nothing` : `fuzz_${target} found a crash; reproducer: ${result.crash}\n${result.log}`);
    // A run that stopped early or never got going would find nothing either.
    t.ok(result.execs >= 100 && result.seconds >= seconds * 0.9, `fuzz_${target} ran (${result.execs} execs in ${result.seconds.toFixed(0)} s)`);
  }
});
