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
  type CheckResult,
  type ExplainedResult,
  type Evidence,
  type LookupError,
  type Company,
  type CompanyType,
  type Location,
  type Asn,
  type SnapshotInfo,
  type SourceInfo,
} from './snapshot.js';
export { buildSnapshot, type BuildOptions, type BuildSummary, type BuildProgress } from './pipeline/build.js';
export { loadSources, type Source, type SourcesConfig } from './pipeline/sources.js';
export { IprError, ERROR_CODES, type ErrorCode } from './errors.js';
export { loadRiskConfig, riskTable, type RiskConfig, type Recommendation } from './risk.js';
