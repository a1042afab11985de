/**
 * The one registry of error codes. Every error the package raises is an
 * {@link IprError} whose `code` is a key of {@link ERROR_CODES}; the native
 * addon throws the same class (registered in native.ts). The HTTP API maps the
 * API codes to their status; the OpenAPI document and the tests read this table.
 */
export const ERROR_CODES = {
  // Answers of the API (docs/API.md "Codes of the API").
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
  // The same code for both windows; the message says which one refused.
  rate_limit_exceeded: { status: 429, message: 'Daily request limit exceeded', perSecondMessage: 'Per-second request limit exceeded' },
  internal_error: { status: 500, message: 'Server error' },
  unavailable: { status: 503, message: 'The service cannot answer this key now; try again later' },
  // Operator-side failures: snapshots, sources, builds (docs/API.md "Codes of the library and the command line").
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
  export_failed: { status: 500, message: 'The export could not be written' },
  backup_failed: { status: 500, message: 'The backup could not be written' },
  data_busy: { status: 409, message: 'Another build, update or rollback is running in the data folder' },
  no_earlier_snapshot: { status: 404, message: 'There is no earlier snapshot to roll back to' },
  store_unavailable: { status: 503, message: 'The customer store cannot be reached' },
  account_exists: { status: 409, message: 'An account with this email exists' },
  account_missing: { status: 404, message: 'No such account' },
  key_missing: { status: 404, message: 'No such key' },
  server_failed: { status: 500, message: 'The server could not start' },
  host_refused: { status: 403, message: 'Without an admin token this port answers only requests for localhost' },
  // The shared customer store (Redis) and the snapshots distributed through it.
  snapshot_refused: { status: 502, message: 'A distributed snapshot was refused' },
  build_locked: { status: 409, message: 'Another node holds the builder lock' },
  // Answers of the dashboard's JSON endpoints (docs/API.md "Codes of the dashboard"), beside the API codes above.
  invalid_request: { status: 400, message: 'The request is not valid' },
  sign_in_failed: { status: 401, message: 'Wrong email or password' },
  password_wrong: { status: 403, message: 'The current password is not right' },
  signed_out: { status: 401, message: 'Sign in first' },
  account_suspended: { status: 403, message: 'This account is suspended' },
  csrf_failed: { status: 403, message: 'The request lacks the CSRF token of this session' },
  cross_site: { status: 403, message: 'Cross-site requests are refused' },
  signup_disabled: { status: 404, message: 'Sign-up is switched off on this server' },
  key_limit: { status: 409, message: 'The account has reached its limit of keys' },
  key_slots_full: { status: 409, message: 'No key can be made: the key table of this server is full' },
  signup_limited: { status: 429, message: 'This server takes no more sign-ups today; try again tomorrow' },
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

/**
 * The error body every HTTP answer uses (docs/API.md "Errors"): the API's, the
 * dashboard's and the admin port's.
 */
export function errorBody(code: ErrorCode, details: Record<string, unknown> = {}, message: string = ERROR_CODES[code].message): string {
  return JSON.stringify({ error: code, message, details });
}

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

const SHOWN_INPUT = 64;

/**
 * What JSON.stringify writes for `value`, stopped once it has `max`
 * characters. JSON.stringify (and String) recurse through every level of a
 * nested array: 20,000 levels, which a 64 KiB batch body holds, overflow the
 * stack. This stops after at most `max` levels, since each adds a character.
 */
function jsonPrefix(value: unknown, max: number): string {
  let out = '';
  const put = (v: unknown): boolean => {
    if (v !== null && typeof v === 'object' && typeof (v as { toJSON?: unknown }).toJSON === 'function') v = (v as { toJSON(): unknown }).toJSON();
    if (Array.isArray(v)) {
      out += '[';
      for (let i = 0; i < v.length; i++) {
        if (i > 0) out += ',';
        if (out.length >= max || !put(v[i] === undefined || typeof v[i] === 'function' ? null : v[i])) return false;
      }
      out += ']';
    } else if (v !== null && typeof v === 'object') {
      out += '{';
      let first = true;
      for (const [key, x] of Object.entries(v)) {
        if (x === undefined || typeof x === 'function' || typeof x === 'symbol') continue;
        out += `${first ? '' : ','}${JSON.stringify(key)}:`;
        first = false;
        if (out.length >= max || !put(x)) return false;
      }
      out += '}';
    } else {
      out += JSON.stringify(v) ?? 'null';
    }
    return out.length < max;
  };
  put(value);
  return out;
}

/** The input of a rejected address as an invalid_ip error shows it (docs/API.md "Errors"): text, cut to 64 characters. */
export function inputAsText(input: unknown): string {
  let text: string;
  if (typeof input === 'string') {
    text = input;
  } else if (input === undefined || typeof input === 'function' || typeof input === 'symbol' || typeof input === 'bigint') {
    text = String(input);
  } else {
    try {
      text = jsonPrefix(input, SHOWN_INPUT);
    } catch {
      text = ''; // a BigInt deep inside a value (only from the JavaScript API)
    }
  }
  return text.length > SHOWN_INPUT ? text.slice(0, SHOWN_INPUT) : text;
}

export function invalidIp(input: unknown): IprError {
  return new IprError('invalid_ip', ERROR_CODES.invalid_ip.message, { ip: inputAsText(input) });
}
