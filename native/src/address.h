// Strict IP address text parsing and canonical formatting.
//
// The accepted grammar is docs/API.md's ("Addresses"): IPv4 as exactly four decimal octets
// without leading zeros; IPv6 per RFC 4291 (one "::" at most, an embedded IPv4
// tail allowed in the last 32 bits). Everything else is rejected: surrounding
// spaces, zone ids, CIDR suffixes, brackets, octal/hex/short IPv4 forms.
// Formatting follows RFC 5952, with the mixed notation for IPv4-mapped addresses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ipr {

using u128 = unsigned __int128;

enum class Family : uint8_t { kV4 = 4, kV6 = 6 };

// A parsed address in the family it is classified as. An IPv4-mapped IPv6
// address (::ffff:a.b.c.d) is classified as the IPv4 address it carries, so it
// parses to family kV4 with `mapped` set; its canonical text stays IPv6.
struct ParsedAddress {
  Family family;
  bool mapped;
  uint32_t v4;  // host order, valid when family == kV4
  u128 v6;      // host order (first text group in the top bits), family == kV6
};

// Longest text form accepted (a full IPv6 address with an IPv4 tail).
constexpr size_t kMaxAddressText = 45;
// Longest canonical text we write: an IPv6 address plus "/128".
constexpr size_t kMaxCidrText = kMaxAddressText + 4;

bool ParseAddress(const char* text, size_t len, ParsedAddress* out);
bool ParseIPv4(const char* text, size_t len, uint32_t* out);
bool ParseIPv6(const char* text, size_t len, u128* out);

// Writes the canonical text (no terminator) and returns its length; `out`
// must hold kMaxAddressText bytes.
size_t FormatIPv4(uint32_t addr, char* out);
size_t FormatIPv6(u128 addr, char* out);
size_t FormatAddress(const ParsedAddress& addr, char* out);

// "network/prefix_len" of the prefix of `addr` with `prefix_len` bits, in the
// address's own canonical notation; `out` must hold kMaxCidrText bytes.
size_t FormatRoute(const ParsedAddress& addr, unsigned prefix_len, char* out);

}  // namespace ipr
