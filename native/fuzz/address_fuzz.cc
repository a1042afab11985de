// libFuzzer target: the strict address parser and RFC 5952 formatting on
// arbitrary bytes. Not only "no crash": every input is checked against
// properties that any correct parser and formatter must have.
//
//   - ParseAddress accepts exactly what ParseIPv4 (no colon) or ParseIPv6
//     (a colon) accepts, with the same value; IPv4-mapped IPv6 parses to the
//     IPv4 address with `mapped` set.
//   - glibc's inet_pton is the independent reference: docs/API.md's grammar
//     (four decimal octets without leading zeros; RFC 4291 with an optional
//     IPv4 tail) is exactly what it accepts, so both must agree on accept and
//     value for every input without a NUL byte.
//   - An accepted address formats to at most kMaxAddressText bytes, in lower
//     case; that text parses back to the same address, and formats to itself.
//   - The IPv6 text equals glibc's inet_ntop (RFC 5952) except where glibc
//     writes the deprecated IPv4-compatible form (::a.b.c.d), which we do not.
//   - FormatRoute, for every prefix length, fits kMaxCidrText and names the
//     masked address.
// A broken property aborts, which libFuzzer reports as a crash with the input.
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "address.h"

using ipr::Family;
using ipr::kMaxAddressText;
using ipr::kMaxCidrText;
using ipr::ParsedAddress;
using ipr::u128;

namespace {

[[noreturn]] void Fail(const char* what, const uint8_t* data, size_t size) {
  std::fprintf(stderr, "address property broken: %s\ninput (%zu bytes): \"", what, size);
  for (size_t i = 0; i < size; ++i) {
    unsigned c = data[i];
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      std::fputc(static_cast<int>(c), stderr);
    } else {
      std::fprintf(stderr, "\\x%02x", c);
    }
  }
  std::fprintf(stderr, "\"\n");
  std::abort();
}

bool Same(const ParsedAddress& a, const ParsedAddress& b) {
  if (a.family != b.family || a.mapped != b.mapped) return false;
  if (a.family == Family::kV4) return a.v4 == b.v4 && (!a.mapped || a.v6 == b.v6);
  return a.v6 == b.v6;
}

u128 FromBytes(const unsigned char* p) {
  u128 v = 0;
  for (int i = 0; i < 16; ++i) v = (v << 8) | p[i];
  return v;
}

void ToBytes(u128 v, unsigned char* p) {
  for (int i = 15; i >= 0; --i) {
    p[i] = static_cast<unsigned char>(v);
    v >>= 8;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  ParsedAddress parsed;
  bool accepted = ipr::ParseAddress(text, size, &parsed);
  uint32_t v4 = 0;
  u128 v6 = 0;
  bool v4_ok = ipr::ParseIPv4(text, size, &v4);
  bool v6_ok = ipr::ParseIPv6(text, size, &v6);
  bool has_colon = std::memchr(data, ':', size) != nullptr;

  if (v4_ok && v6_ok) Fail("both ParseIPv4 and ParseIPv6 accept", data, size);
  if (accepted != (has_colon ? v6_ok : v4_ok)) Fail("ParseAddress disagrees with ParseIPv4/ParseIPv6", data, size);
  if (accepted && size > kMaxAddressText) Fail("accepted a text longer than kMaxAddressText", data, size);
  if (accepted && !has_colon && (parsed.family != Family::kV4 || parsed.mapped || parsed.v4 != v4)) {
    Fail("ParseAddress and ParseIPv4 give different values", data, size);
  }
  if (accepted && has_colon) {
    bool mapped = (v6 >> 32) == 0xFFFF;
    bool ok = mapped ? parsed.family == Family::kV4 && parsed.mapped && parsed.v4 == static_cast<uint32_t>(v6) &&
                           parsed.v6 == v6
                     : parsed.family == Family::kV6 && !parsed.mapped && parsed.v6 == v6;
    if (!ok) Fail("ParseAddress and ParseIPv6 give different values", data, size);
  }

  // The independent reference, on C strings: inputs with a NUL are skipped.
  if (std::memchr(data, 0, size) == nullptr) {
    std::string c_text(text, size);
    unsigned char ref[16];
    bool ref4 = inet_pton(AF_INET, c_text.c_str(), ref) == 1;
    if (ref4 != v4_ok) Fail(v4_ok ? "ParseIPv4 accepts what inet_pton refuses" : "ParseIPv4 refuses what inet_pton accepts", data, size);
    if (ref4 && v4 != (uint32_t{ref[0]} << 24 | uint32_t{ref[1]} << 16 | uint32_t{ref[2]} << 8 | ref[3])) {
      Fail("ParseIPv4 and inet_pton give different values", data, size);
    }
    bool ref6 = inet_pton(AF_INET6, c_text.c_str(), ref) == 1;
    if (ref6 != v6_ok) Fail(v6_ok ? "ParseIPv6 accepts what inet_pton refuses" : "ParseIPv6 refuses what inet_pton accepts", data, size);
    if (ref6 && v6 != FromBytes(ref)) Fail("ParseIPv6 and inet_pton give different values", data, size);
  }

  if (!accepted) return 0;

  // Canonical text: bounded, lower case, a fixed point that parses back.
  char canonical[kMaxAddressText + 1];
  size_t n = ipr::FormatAddress(parsed, canonical);
  if (n == 0 || n > kMaxAddressText) Fail("canonical text length out of range", data, size);
  for (size_t i = 0; i < n; ++i) {
    if (canonical[i] >= 'A' && canonical[i] <= 'Z') Fail("canonical text has upper case", data, size);
  }
  ParsedAddress again;
  if (!ipr::ParseAddress(canonical, n, &again)) Fail("canonical text does not parse", data, size);
  if (!Same(parsed, again)) Fail("canonical text parses to another address", data, size);
  char twice[kMaxAddressText + 1];
  size_t n2 = ipr::FormatAddress(again, twice);
  if (n2 != n || std::memcmp(canonical, twice, n) != 0) Fail("canonical text is not a fixed point", data, size);

  // IPv6 texts against inet_ntop (RFC 5952 in glibc).
  if (has_colon) {
    unsigned char bytes[16];
    ToBytes(v6, bytes);
    char ref[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, bytes, ref, sizeof ref) == nullptr) Fail("inet_ntop failed", data, size);
    bool compatible_form = (v6 >> 32) == 0 && (v6 >> 16) != 0;  // glibc writes ::a.b.c.d here
    if (!compatible_form && (std::strlen(ref) != n || std::memcmp(ref, canonical, n) != 0)) {
      Fail("canonical IPv6 text differs from inet_ntop", data, size);
    }
  }

  // Routes: every prefix length of the address's own family.
  unsigned width = parsed.family == Family::kV4 ? 32 : 128;
  for (unsigned len = 0; len <= width + 1; ++len) {
    char route[kMaxCidrText + 1];
    size_t r = ipr::FormatRoute(parsed, len, route);
    if (r == 0 || r > kMaxCidrText) Fail("route text length out of range", data, size);
    const char* slash = static_cast<const char*>(std::memchr(route, '/', r));
    if (slash == nullptr) Fail("route text without a slash", data, size);
    unsigned clamped = len > width ? width : len;
    if (std::to_string(clamped) != std::string(slash + 1, static_cast<size_t>(route + r - (slash + 1)))) Fail("route prefix length wrong", data, size);
    ParsedAddress network;
    if (!ipr::ParseAddress(route, static_cast<size_t>(slash - route), &network)) Fail("route network does not parse", data, size);
    bool ok;
    if (parsed.family == Family::kV4) {
      uint32_t mask = clamped == 0 ? 0 : ~uint32_t{0} << (32 - clamped);
      ok = network.family == Family::kV4 && !network.mapped && network.v4 == (parsed.v4 & mask);
    } else {
      u128 mask = clamped == 0 ? 0 : ~u128{0} << (128 - clamped);
      u128 expect = parsed.v6 & mask;
      // A masked IPv6 address can land in ::ffff:0:0/96 and parse as mapped.
      ok = network.family == Family::kV6 ? network.v6 == expect : network.mapped && network.v6 == expect;
    }
    if (!ok) Fail("route network is not the masked address", data, size);
  }
  return 0;
}
