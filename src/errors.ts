/**
 * The one registry of error codes. Every error the package raises is an
 * {@link IprError} whose `code` is a key of {@link ERROR_CODES}; the native
 * addon throws the same class (registered in native.ts). The HTTP API maps the
 * API codes to their status; the OpenAPI document and the tests read this table.
 */
export const ERROR_CODES = {
  // Answers of the API (interface-spec.md section 7 and decisions.md).
  invalid_ip: { status: 400, message: 'The IP address format is invalid' },
  missing_ip: { status: 400, message: 'The request body has no ip field' },
  invalid_json: { status: 400, message: 'The request body is not a JSON object' },
  invalid_batch: { status: 400, message: 'The request body needs an ips array of 1 to 1000 entries' },
  unauthorized: { status: 401, message: 'Missing or invalid API key' },
  forbidden: { status: 403, message: 'API key does not have access' },
  not_found: { status: 404, message: 'No such endpoint' },
  method_not_allowed: { status: 405, message: 'Method not allowed on this endpoint' },
  payload_too_large: { status: 413, message: 'The request body is too large' },
  unsupported_media_type: { status: 415, message: 'Content-Type must be application/json' },
  rate_limit_exceeded: { status: 429, message: 'Daily request limit exceeded' },
  internal_error: { status: 500, message: 'Server error' },
  unavailable: { status: 503, message: 'The service is starting or shutting down' },
  // Operator-side failures: snapshots, sources, builds.
  snapshot_missing: { status: 503, message: 'No snapshot is published' },
  snapshot_invalid: { status: 503, message: 'The snapshot file is not valid' },
  snapshot_version: { status: 503, message: 'The snapshot has another format version' },
  snapshot_damaged: { status: 503, message: 'The snapshot being served was changed on disk' },
  snapshot_closed: { status: 500, message: 'The snapshot was closed' },
  sources_invalid: { status: 500, message: 'The sources configuration is not valid' },
  source_unreadable: { status: 500, message: 'A source could not be read' },
  source_bad_lines: { status: 500, message: 'A source has too many bad lines' },
  source_empty: { status: 500, message: 'A source has no records' },
  mmdb_invalid: { status: 500, message: 'The MaxMind DB file is not valid' },
  invalid_argument: { status: 500, message: 'Invalid argument' },
  write_failed: { status: 500, message: 'The snapshot could not be written' },
  account_exists: { status: 409, message: 'An account with this email exists' },
  account_missing: { status: 404, message: 'No such account' },
  key_missing: { status: 404, message: 'No such key' },
  server_failed: { status: 500, message: 'The server could not start' },
  // Answers of the dashboard's JSON endpoints (src/dashboard), beside the API codes above.
  invalid_request: { status: 400, message: 'The request is not valid' },
  sign_in_failed: { status: 401, message: 'Wrong email or password' },
  signed_out: { status: 401, message: 'Sign in first' },
  account_suspended: { status: 403, message: 'This account is suspended' },
  csrf_failed: { status: 403, message: 'The request lacks the CSRF token of this session' },
  cross_site: { status: 403, message: 'Cross-site requests are refused' },
  signup_disabled: { status: 404, message: 'Sign-up is switched off on this server' },
  key_limit: { status: 409, message: 'The account has reached its limit of keys' },
  sign_in_limited: { status: 429, message: 'Too many sign-in attempts; try again later' },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The codes the HTTP API answers with: what the OpenAPI document lists. */
export const API_ERROR_CODES = [
  'invalid_ip',
  'missing_ip',
  'invalid_json',
  'invalid_batch',
  'unauthorized',
  'forbidden',
  'not_found',
  'method_not_allowed',
  'payload_too_large',
  'unsupported_media_type',
  'rate_limit_exceeded',
  'internal_error',
  'unavailable',
] as const satisfies readonly ErrorCode[];
export type ApiErrorCode = (typeof API_ERROR_CODES)[number];


export class IprError extends Error {
  /** Stable, machine-readable: a key of ERROR_CODES. */
  code: ErrorCode;
  /** Extra information; for `invalid_ip`, the offending input as text. */
  details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string = ERROR_CODES[code].message, details: Record<string, unknown> = {}) {
    super(message);
    this.name = 'IprError';
    this.code = code;
    this.details = details;
  }
}

/** The input of a rejected address as decisions.md shows it: text, cut to 64 characters. */
export function inputAsText(input: unknown): string {
  let text: string;
  try {
    text = typeof input === 'string' ? input : JSON.stringify(input) ?? String(input);
  } catch {
    text = String(input);
  }
  return text.length > 64 ? text.slice(0, 64) : text;
}

export function invalidIp(input: unknown): IprError {
  return new IprError('invalid_ip', ERROR_CODES.invalid_ip.message, { ip: inputAsText(input) });
}
