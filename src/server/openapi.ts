/**
 * The OpenAPI 3.1 document of the whole API, built from the error registry
 * (errors.ts) and the plans, so the document, the server and the tests list
 * the same codes. `npm run openapi` writes it to openapi.json; the server
 * serves it at /v1/openapi.json; test/http-openapi.test.ts checks both.
 */
import { readFileSync } from 'node:fs';
import { API_ERROR_CODES, ERROR_CODES, type ApiErrorCode } from '../errors.js';
import { MAX_BATCH, MAX_BATCH_BODY, MAX_CHECK_BODY } from './http.js';
import type { Plan } from '../plans.js';

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const nullable = (type: string, extra: object = {}) => ({ type: [type, 'null'], ...extra });

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
    [503, "The key's slot lies past this server's limit table: another server on the same data folder was started with a larger --max-keys; restart this one.", ['unavailable']],
  ];
  const limited = {
    description:
      'A limit is exceeded. `message` is "Daily request limit exceeded" or "Per-second request limit exceeded"; ' +
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
      description:
        'Classifies one IPv4 or IPv6 address: VPN, proxy, Tor exit, private relay, hosting; a 0-100 risk score and an allow/verify/block ' +
        'recommendation; company, location and ASN data.\n\n' +
        'Order of checks on the check endpoints: authentication (401/403), then limits (429), then the body (413/415/400). ' +
        'Every authenticated request that passes the limits counts against the quota, including ones that then fail validation; ' +
        '401 and 429 answers do not count. Requests without a valid key are limited per client address.\n\n' +
        `Limits per key, by plan:\n\n| plan | requests per day | requests per second |\n|---|---|---|\n${planRows}\n\n` +
        'Risk score: the sum of the points of the flags (tor 80, vpn 60, proxy 50, relay 40, hosting 30 by default), capped at 100; ' +
        'recommendation `block` from 70, `verify` from 40, else `allow` (operators can change both).\n\n' +
        'Data: X4BNet lists_vpn (MIT), Tor exit lists, iCloud Private Relay egress ranges, monosans/proxy-list (MIT), lord-alfred/ipranges (CC0), ' +
        '@ip-location-db/asn (CC BY 4.0: RouteViews, NRO, DB-IP), [IP Geolocation by DB-IP](https://db-ip.com) (CC BY 4.0).',
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
        CheckResult: {
          type: 'object',
          description: 'Fields in this order, no others. Special-purpose addresses (private, loopback, documentation...) answer all flags false, score 0, allow, and null objects.',
          required: ['ip', 'is_vpn', 'is_proxy', 'is_tor', 'is_relay', 'is_hosting', 'risk_score', 'recommendation', 'company', 'location', 'asn'],
          additionalProperties: false,
          properties: {
            ip: { type: 'string', description: 'The canonical text of the address (RFC 5952 for IPv6; IPv4-mapped as ::ffff:a.b.c.d).' },
            is_vpn: { type: 'boolean' },
            is_proxy: { type: 'boolean' },
            is_tor: { type: 'boolean' },
            is_relay: { type: 'boolean', description: "A device maker's private relay (iCloud Private Relay)." },
            is_hosting: { type: 'boolean' },
            risk_score: { type: 'integer', minimum: 0, maximum: 100 },
            recommendation: { type: 'string', enum: ['allow', 'verify', 'block'] },
            company: { oneOf: [{ $ref: '#/components/schemas/Company' }, { type: 'null' }] },
            location: { oneOf: [{ $ref: '#/components/schemas/Location' }, { type: 'null' }] },
            asn: { oneOf: [{ $ref: '#/components/schemas/Asn' }, { type: 'null' }] },
          },
        },
        Company: {
          type: 'object',
          required: ['name', 'type', 'domain'],
          additionalProperties: false,
          properties: {
            name: { type: 'string' },
            type: {
              type: 'string',
              enum: ['hosting', 'isp', 'business', 'education', 'government', 'vpn'],
              description:
                'From a provider source (cloud ranges: hosting), else from the ASN: vpn or hosting when a VPN or datacenter ASN list names it, ' +
                'else from the organisation name (education, government, hosting, isp), else business.',
            },
            domain: nullable('string'),
          },
        },
        Location: {
          type: 'object',
          required: ['country', 'country_name', 'city', 'region', 'latitude', 'longitude'],
          additionalProperties: false,
          properties: {
            country: nullable('string', { description: 'ISO 3166-1 alpha-2 code.' }),
            country_name: nullable('string'),
            city: nullable('string'),
            region: nullable('string'),
            latitude: nullable('number', { description: 'Decimal degrees, 4 places.' }),
            longitude: nullable('number', { description: 'Decimal degrees, 4 places.' }),
          },
        },
        Asn: {
          type: 'object',
          required: ['number', 'name', 'route'],
          additionalProperties: false,
          properties: {
            number: { type: 'integer' },
            name: nullable('string'),
            route: { type: 'string', description: 'The most specific announced prefix containing the address, in CIDR.' },
          },
        },
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
          description: 'No authentication, no rate-limit headers, never limited.',
          responses: {
            '200': { description: 'A snapshot is loaded and the service answers.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Health' } } } },
            '503': { description: 'Starting or shutting down.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Health' } } } },
          },
        },
      },
      '/openapi.json': {
        get: { operationId: 'openapi', summary: 'This document', responses: { '200': { description: 'The OpenAPI 3.1 document.', content: { 'application/json': { schema: { type: 'object' } } } } } },
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
