// The bodies of the ip-reputation API. Generated from openapi.json by `npm run openapi`
// (src/server/openapi.ts, clientTypes): do not edit.

export interface CheckRequest {
  /** An IPv4 address (four decimal octets, no leading zeros) or IPv6 address (RFC 4291, an IPv4 tail allowed). Spaces, zone ids, CIDR suffixes and octal/hex/short IPv4 are rejected. */
  ip: string;
}

/** Fields in this order, no others (`evidence` only with `?explain=1`, after them). Special-purpose addresses (private, loopback, documentation...) answer all flags false, score 0, allow, and null objects. */
export interface CheckResult {
  /** The canonical text of the address (RFC 5952 for IPv6; IPv4-mapped as ::ffff:a.b.c.d). */
  ip: string;
  /** The address belongs to a VPN provider. */
  is_vpn: boolean;
  /** The address is a known proxy server. */
  is_proxy: boolean;
  /** The address is a Tor exit node. */
  is_tor: boolean;
  /** A device maker's private relay address (iCloud Private Relay). */
  is_relay: boolean;
  /** The address is in a hosting or datacenter network. */
  is_hosting: boolean;
  risk_score: number;
  recommendation: "allow" | "verify" | "block";
  company: Company | null;
  location: Location | null;
  asn: Asn | null;
  /** With `?explain=1` only: every source listing the address, in the tables whose flag it carries. */
  evidence?: undefined[];
}

export interface Company {
  name: string;
  /** From a provider source (cloud ranges: hosting; a VPN provider's own server list: vpn), else from the ASN: vpn or hosting when a VPN or datacenter ASN list names it, else from the organisation name (education, government, hosting, isp), else business. */
  type: "hosting" | "isp" | "business" | "education" | "government" | "vpn";
  domain: string | null;
}

export interface Location {
  /** ISO 3166-1 alpha-2 code. */
  country: string | null;
  country_name: string | null;
  city: string | null;
  region: string | null;
  /** Decimal degrees, 4 places. */
  latitude: number | null;
  /** Decimal degrees, 4 places. */
  longitude: number | null;
}

export interface Asn {
  number: number;
  name: string | null;
  /** The most specific announced prefix containing the address, in CIDR. */
  route: string;
}

export interface ErrorBody {
  /** Machine-readable code. */
  error: "invalid_ip" | "missing_ip" | "invalid_json" | "invalid_batch" | "unauthorized" | "forbidden" | "not_found" | "method_not_allowed" | "payload_too_large" | "unsupported_media_type" | "rate_limit_exceeded" | "internal_error" | "unavailable";
  message: string;
  /** Extra information; `{}` when there is none. invalid_ip: `{"ip": <the input as text, cut to 64 characters>}`. */
  details: Record<string, unknown>;
}

export type RateLimitErrorBody = ErrorBody & {
  error?: "rate_limit_exceeded";
  retry_after: number;
};

export interface BatchRequest {
  ips: unknown[];
}

export interface BatchResponse {
  /** In the order of `ips`: a check result, or an invalid_ip error object for an entry that is not an address. */
  results: (CheckResult | ErrorBody)[];
}

export interface Health {
  status: "healthy" | "unavailable";
}
