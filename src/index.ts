/**
 * ip-reputation: the package's public API.
 *
 *   import { openSnapshot } from 'ip-reputation';
 *   const snapshot = openSnapshot('./data');
 *   snapshot.lookup('8.8.8.8'); // a check result, as POST /v1/check answers it
 */
export {
  openSnapshot,
  canonicalAddress,
  Snapshot,
  type OpenOptions,
  type LookupError,
  type SnapshotInfo,
  type SourceInfo,
  type Answer,
  type PrefixBatch,
  ExportEntry,
  EXPORT_ENTRY_WORDS,
} from './snapshot.js';
export type { CheckResult, Company, CompanyType, Location, Asn, Recommendation, Evidence, ExplainedResult } from './result.js';
export { buildSnapshot, type BuildOptions, type BuildSummary, type BuildProgress } from './pipeline/build.js';
export { exportMmdb, type ExportOptions, type ExportSummary } from './pipeline/mmdb-export.js';
export { loadSources, type Source, type SourcesConfig } from './pipeline/sources.js';
export { IprError, ERROR_CODES, type ErrorCode } from './errors.js';
export { loadRiskConfig, riskTable, type RiskConfig } from './risk.js';
