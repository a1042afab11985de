/**
 * The OpenAPI 3.1 document of the whole API, built from the error registry
 * (errors.ts), the check result's definition (result.ts), the plans and the
 * default risk configuration, so the document, the server and the tests list
 * the same codes and fields. `npm run openapi` writes it to openapi.json; the server
 * serves it at /v1/openapi.json; test/http-openapi.test.ts checks both.
 */
import { readFileSync } from 'node:fs';
import { API_ERROR_CODES, ERROR_CODES, type ApiErrorCode } from '../errors.js';
import { MAX_BATCH, MAX_BATCH_BODY, MAX_CHECK_BODY } from './api.js';
import type { Plan } from '../plans.js';
import { FLAG_TABLES, resultSchemas } from '../result.js';
import { DEFAULT_RISK_CONFIG_PATH, loadRiskConfig } from '../risk.js';

const { version: VERSION, license: LICENSE } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
  license: string;
};

const RATE_HEADERS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];
const rateHeaderRefs = Object.fromEntries(RATE_HEADERS.map((h) => [h, { $ref: `#/components/headers/${h}` }]));

function errorResponse(description: string, codes: ApiErrorCode[], rateLimited: boolean) {
  return {
    description: `${description} Codes: ${codes.map((c) => `\`${c}\``).join(', ')}.`,
    ...(rateLimited ? { headers: rateHeaderRefs } : {}),
    content: {
      'application/json': {
        schema: {
          allOf: [{ $ref: '#/components/schemas/Error' }, { properties: { error: { enum: codes } } }],
        },
      },
    },
  };
}

export function openapiDocument(plans: Map<string, Plan>): object {
  const risk = loadRiskConfig(DEFAULT_RISK_CONFIG_PATH);
  const planRows = [...plans.values()]
    .map((p) => `| ${p.name} | ${p.requestsPerDay === null ? 'unlimited' : p.requestsPerDay.toLocaleString('en-US')} | ${p.requestsPerSecond} |`)
    .join('\n');
  const rateHeaders = {
    'X-RateLimit-Limit': {
      description: "The plan's requests per day; for a plan without a daily limit, its requests per second. For a request without a valid key: the per-address limit per second.",
      schema: { type: 'integer' },
    },
    'X-RateLimit-Remaining': { description: 'Requests left in that window.', schema: { type: 'integer' } },
    'X-RateLimit-Reset': {
      description: 'Unix time in seconds when the window resets: the next UTC midnight for the daily window, the next second for a per-second one.',
      schema: { type: 'integer' },
    },
  };
  const checkErrors: [number, string, ApiErrorCode[]][] = [
    [400, 'The body or the address is invalid.', ['invalid_json', 'missing_ip', 'invalid_ip']],
    [401, 'No Authorization header, not `Bearer <key>`, or an unknown or revoked key.', ['unauthorized']],
    [403, "The key's account is suspended, or the caller's address is not among the key's allowed source addresses.", ['forbidden']],
    [413, `The body is over ${MAX_CHECK_BODY} bytes.`, ['payload_too_large']],
    [415, 'Content-Type is not application/json (parameters such as charset are allowed).', ['unsupported_media_type']],
    [500, 'Unexpected failure; never a stack trace.', ['internal_error']],
    [503, "The key's slot lies past this server's limit table (another server on the same data folder was started with a larger --max-keys: restart this one); or, on a node of a shared store (--store), the store has been unreachable past --store-max-stale or sent no lease for the key within 1 s (Retry-After says when to try again).", ['unavailable']],
  ];
  const limited = {
    description:
      `A limit is exceeded. \`message\` is "${ERROR_CODES.rate_limit_exceeded.message}" or "${ERROR_CODES.rate_limit_exceeded.perSecondMessage}"; ` +
      '`retry_after` (also the Retry-After header) is the whole seconds until the window resets (1 for the per-second window).',
    headers: { ...rateHeaderRefs, 'Retry-After': { schema: { type: 'integer' } } },
    content: { 'application/json': { schema: { $ref: '#/components/schemas/RateLimitError' } } },
  };
  const responsesOf = (errors: [number, string, ApiErrorCode[]][]) =>
    Object.fromEntries(errors.map(([status, text, codes]) => [String(status), errorResponse(text, codes, status !== 500)]));
  const checkSecurity = [{ bearer: [] }];

  const document = {
    openapi: '3.1.0',
    info: {
      title: 'IP reputation API',
      version: VERSION,
      license: { name: LICENSE, identifier: LICENSE },
      description:
        'Classifies one IPv4 or IPv6 address: VPN, proxy, Tor exit, private relay, hosting; a 0-100 risk score and an allow/verify/block ' +
        'recommendation; company, location and ASN data.\n\n' +
        'Order of checks on the check endpoints: authentication (401/403), then limits (429), then the body (413/415/400). ' +
        'Every authenticated request that passes the limits counts against the quota, including ones that then fail validation; ' +
        '401 and 429 answers do not count. Requests without a valid key are limited per client address.\n\n' +
        `Limits per key, by plan:\n\n| plan | requests per day | requests per second |\n|---|---|---|\n${planRows}\n\n` +
        `Risk score: the sum of the points of the flags (${FLAG_TABLES.map((flag) => `${flag} ${risk.points[`is_${flag}`]}`).join(', ')} by default), ` +
        `capped at ${risk.cap}; recommendation \`block\` from ${risk.block_from}, \`verify\` from ${risk.verify_from}, else \`allow\` ` +
        '(operators can change both).\n\n' +
        'Data: X4BNet lists_vpn (MIT), Tor exit lists and Onionoo (CC0), iCloud Private Relay egress ranges, the VPN providers\' own server lists ' +
        '(NordVPN, Proton VPN, Mullvad, PIA, Surfshark, Windscribe, AirVPN, IVPN, OVPN, RiseupVPN; Joe12387/open-source-vpn-ip-lists, CC0), ' +
        'monosans/proxy-list (MIT), elliottophellia/proxylist (WTFPL), fyvri/fresh-proxy-list (MIT), O-X-L/risk-db-lists (BSD-3-Clause), ' +
        'brianhama/bad-asn-list (MIT), Umkus/ip-index (GPL-3.0), lord-alfred/ipranges (CC0), ' +
        '@ip-location-db/asn (CC BY 4.0: RouteViews, NRO, DB-IP), [IP Geolocation by DB-IP](https://db-ip.com) (CC BY 4.0). ' +
        '`ipr info` lists the sources of the snapshot being served, with their licenses.',
    },
    servers: [{ url: '/v1', description: 'This server; the version is the path prefix.' }],
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description:
            'An API key, created and revoked in the customer dashboard that this server serves at /dashboard (not through this API): ' +
            '`Authorization: Bearer <API_KEY>`. Keep it server-side.' },
      },
      headers: rateHeaders,
      schemas: {
        CheckRequest: {
          type: 'object',
          required: ['ip'],
          properties: {
            ip: {
              type: 'string',
              description:
                'An IPv4 address (four decimal octets, no leading zeros) or IPv6 address (RFC 4291, an IPv4 tail allowed). ' +
                'Spaces, zone ids, CIDR suffixes and octal/hex/short IPv4 are rejected.',
              examples: ['8.8.8.8', '2001:4860:4860::8888'],
            },
          },
        },
        ...resultSchemas(),
        Error: {
          type: 'object',
          required: ['error', 'message', 'details'],
          properties: {
            error: { type: 'string', enum: [...API_ERROR_CODES], description: 'Machine-readable code.' },
            message: { type: 'string' },
            details: { type: 'object', description: 'Extra information; `{}` when there is none. invalid_ip: `{"ip": <the input as text, cut to 64 characters>}`.' },
          },
        },
        RateLimitError: {
          allOf: [
            { $ref: '#/components/schemas/Error' },
            { type: 'object', required: ['retry_after'], properties: { error: { const: 'rate_limit_exceeded' }, retry_after: { type: 'integer', minimum: 1 } } },
          ],
        },
        BatchRequest: {
          type: 'object',
          required: ['ips'],
          properties: { ips: { type: 'array', minItems: 1, maxItems: MAX_BATCH, items: {} } },
        },
        BatchResponse: {
          type: 'object',
          required: ['results'],
          additionalProperties: false,
          properties: {
            results: {
              type: 'array',
              description: 'In the order of `ips`: a check result, or an invalid_ip error object for an entry that is not an address.',
              items: { oneOf: [{ $ref: '#/components/schemas/CheckResult' }, { $ref: '#/components/schemas/Error' }] },
            },
          },
        },
        Health: { type: 'object', required: ['status'], additionalProperties: false, properties: { status: { type: 'string', enum: ['healthy', 'unavailable'] } } },
      },
    },
    paths: {
      '/check': {
        post: {
          operationId: 'checkIp',
          summary: 'Check one IP address',
          security: checkSecurity,
          parameters: [
            {
              name: 'explain',
              in: 'query',
              required: false,
              schema: { type: 'string', enum: ['1'] },
              description: '`1`: the answer adds `evidence`, which sources list the address (why it is flagged).',
            },
          ],
          requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/CheckRequest' } } } },
          responses: {
            '200': {
              description: 'The check result.',
              headers: rateHeaderRefs,
              content: { 'application/json': { schema: { $ref: '#/components/schemas/CheckResult' } } },
            },
            ...responsesOf(checkErrors),
            '429': limited,
          },
        },
      },
      '/check/batch': {
        post: {
          operationId: 'checkIps',
          summary: `Check up to ${MAX_BATCH} addresses; each counts as one request`,
          description:
            `Body up to ${MAX_BATCH_BODY} bytes. The request counts once when it passes the limits; after the body is read, ` +
            'the rest of its addresses are counted together, and a batch that does not fit in what is left answers 429 as a whole.',
          security: checkSecurity,
          requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/BatchRequest' } } } },
          responses: {
            '200': {
              description: 'One result per address, in order.',
              headers: rateHeaderRefs,
              content: { 'application/json': { schema: { $ref: '#/components/schemas/BatchResponse' } } },
            },
            ...responsesOf([
              [400, 'The body is not a JSON object, or `ips` is not an array of 1 to 1000 entries.', ['invalid_json', 'invalid_batch']],
              ...checkErrors.filter(([status]) => status !== 400),
            ]),
            '429': limited,
          },
        },
      },
      '/health': {
        get: {
          operationId: 'health',
          summary: 'Whether the service answers',
          security: [],
          description: 'No authentication, no rate-limit headers, never limited.',
          responses: {
            '200': { description: 'A snapshot is loaded and the service answers.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Health' } } } },
            '503': { description: 'Starting or shutting down.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Health' } } } },
          },
        },
      },
      '/openapi.json': {
        get: { operationId: 'openapi', summary: 'This document', security: [], responses: { '200': { description: 'The OpenAPI 3.1 document.', content: { 'application/json': { schema: { type: 'object' } } } } } },
      },
    },
    'x-other-answers': {
      description:
        'Every endpoint: an unknown path answers 404 not_found; a known path with another method answers 405 method_not_allowed with an Allow header. ' +
        'HEAD is answered wherever GET is, and with the status of any other path: the same headers, no content.',
      codes: Object.fromEntries((['not_found', 'method_not_allowed'] as const).map((c) => [c, ERROR_CODES[c].status])),
    },
  };
  return document;
}

/** The schemas the client's types are made of, and the names they take there (`Error` would hide the global). */
const CLIENT_TYPES: Record<string, string> = {
  CheckRequest: 'CheckRequest',
  CheckResult: 'CheckResult',
  Company: 'Company',
  Location: 'Location',
  Asn: 'Asn',
  Error: 'ErrorBody',
  RateLimitError: 'RateLimitErrorBody',
  BatchRequest: 'BatchRequest',
  BatchResponse: 'BatchResponse',
  Health: 'Health',
};

interface Schema {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  $ref?: string;
  oneOf?: Schema[];
  allOf?: Schema[];
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  description?: string;
}

function docComment(text: string | undefined, indent: string): string {
  if (text === undefined) return '';
  const lines = text.split('\n');
  return lines.length === 1 ? `${indent}/** ${text} */\n` : `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join('\n')}\n${indent} */\n`;
}

/** The TypeScript type of a schema of the document (the subset openapiDocument uses). */
function typeOf(schema: Schema, indent: string): string {
  if (schema.$ref !== undefined) return CLIENT_TYPES[schema.$ref.split('/').pop()!]!;
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum !== undefined) return schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  if (schema.oneOf !== undefined) return schema.oneOf.map((s) => typeOf(s, indent)).join(' | ');
  if (schema.allOf !== undefined) return schema.allOf.map((s) => typeOf(s, indent)).join(' & ');
  const types = Array.isArray(schema.type) ? schema.type : schema.type === undefined ? [] : [schema.type];
  if (types.length === 0) return 'unknown';
  return types
    .map((type) => {
      if (type === 'null') return 'null';
      if (type === 'string') return 'string';
      if (type === 'integer' || type === 'number') return 'number';
      if (type === 'boolean') return 'boolean';
      if (type === 'array') {
        const item = typeOf(schema.items ?? {}, indent);
        return /[|&]/.test(item) ? `(${item})[]` : `${item}[]`;
      }
      if (schema.properties === undefined) return 'Record<string, unknown>';
      const required = new Set(schema.required ?? []);
      const fields = Object.entries(schema.properties).map(
        ([name, property]) => `${docComment(property.description, `${indent}  `)}${indent}  ${name}${required.has(name) ? '' : '?'}: ${typeOf(property, `${indent}  `)};`,
      );
      return `{\n${fields.join('\n')}\n${indent}}`;
    })
    .join(' | ');
}

/**
 * The TypeScript types of the API's bodies, generated from the document: the
 * typed client's types (src/client/types.ts, written by `npm run openapi`;
 * test/client-types.test.ts fails when they drift from the document).
 */
export function clientTypes(document: object): string {
  const schemas = (document as { components: { schemas: Record<string, Schema> } }).components.schemas;
  const declarations = Object.entries(CLIENT_TYPES).map(([schemaName, name]) => {
    const schema = schemas[schemaName]!;
    const type = typeOf(schema, '');
    const comment = docComment(schema.description, '');
    return type.startsWith('{\n') ? `${comment}export interface ${name} ${type}` : `${comment}export type ${name} = ${type};`;
  });
  return `// The bodies of the ip-reputation API. Generated from openapi.json by \`npm run openapi\`
// (src/server/openapi.ts, clientTypes): do not edit.

${declarations.join('\n\n')}
`;
}
