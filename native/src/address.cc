#include "address.h"

namespace ipr {
namespace {

inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

inline int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

size_t WriteDecimal(unsigned v, char* out) {
  char tmp[10];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

size_t WriteHexGroup(unsigned v, char* out) {
  static const char kDigits[] = "0123456789abcdef";
  size_t n = 0;
  bool started = false;
  for (int shift = 12; shift >= 0; shift -= 4) {
    unsigned d = (v >> shift) & 0xF;
    if (d != 0 || started || shift == 0) {
      out[n++] = kDigits[d];
      started = true;
    }
  }
  return n;
}

constexpr u128 kMappedPrefix = static_cast<u128>(0xFFFF) << 32;

}  // namespace

bool ParseIPv4(const char* s, size_t len, uint32_t* out) {
  uint32_t value = 0;
  size_t i = 0;
  for (int part = 0; part < 4; ++part) {
    if (part > 0) {
      if (i >= len || s[i] != '.') return false;
      ++i;
    }
    size_t start = i;
    unsigned octet = 0;
    while (i < len && IsDigit(s[i])) {
      if (i - start == 3) return false;  // four or more digits
      octet = octet * 10 + static_cast<unsigned>(s[i] - '0');
      ++i;
    }
    size_t digits = i - start;
    if (digits == 0 || octet > 255) return false;
    if (digits > 1 && s[start] == '0') return false;  // leading zero: octal in some parsers
    value = (value << 8) | octet;
  }
  if (i != len) return false;
  *out = value;
  return true;
}

bool ParseIPv6(const char* s, size_t len, u128* out) {
  if (len < 2 || len > kMaxAddressText) return false;
  uint16_t groups[8];
  int count = 0;
  int gap = -1;  // index in `groups` where "::" stands
  size_t i = 0;
  if (s[0] == ':') {
    if (s[1] != ':') return false;
    gap = 0;
    i = 2;
  }
  while (i < len) {
    size_t start = i;
    unsigned value = 0;
    while (i < len && HexValue(s[i]) >= 0 && i - start < 5) {
      value = value * 16 + static_cast<unsigned>(HexValue(s[i]));
      ++i;
    }
    if (i < len && s[i] == '.') {
      // An IPv4 tail takes the last two groups and must end the text.
      if (count > 6) return false;
      uint32_t v4;
      if (!ParseIPv4(s + start, len - start, &v4)) return false;
      groups[count++] = static_cast<uint16_t>(v4 >> 16);
      groups[count++] = static_cast<uint16_t>(v4 & 0xFFFF);
      i = len;
      break;
    }
    size_t digits = i - start;
    if (digits == 0 || digits > 4 || count == 8) return false;
    groups[count++] = static_cast<uint16_t>(value);
    if (i == len) break;
    if (s[i] != ':') return false;
    ++i;
    if (i < len && s[i] == ':') {
      if (gap >= 0) return false;  // a second "::"
      gap = count;
      ++i;
    } else if (i == len) {
      return false;  // a single trailing colon
    }
  }
  if (gap < 0 ? count != 8 : count > 7) return false;

  // Spread the groups after "::" to the end; the groups it stands for are zero.
  uint16_t full[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int tail = gap < 0 ? 0 : count - gap;
  for (int g = 0; g < count - tail; ++g) full[g] = groups[g];
  for (int g = 0; g < tail; ++g) full[8 - tail + g] = groups[count - tail + g];
  u128 value = 0;
  for (int g = 0; g < 8; ++g) value = (value << 16) | full[g];
  *out = value;
  return true;
}

bool ParseAddress(const char* s, size_t len, ParsedAddress* out) {
  if (len == 0 || len > kMaxAddressText) return false;
  bool has_colon = false;
  for (size_t i = 0; i < len; ++i) {
    if (s[i] == ':') {
      has_colon = true;
      break;
    }
  }
  if (!has_colon) {
    uint32_t v4;
    if (!ParseIPv4(s, len, &v4)) return false;
    *out = ParsedAddress{Family::kV4, false, v4, 0};
    return true;
  }
  u128 v6;
  if (!ParseIPv6(s, len, &v6)) return false;
  if ((v6 >> 32) == (kMappedPrefix >> 32)) {
    *out = ParsedAddress{Family::kV4, true, static_cast<uint32_t>(v6), v6};
  } else {
    *out = ParsedAddress{Family::kV6, false, 0, v6};
  }
  return true;
}

size_t FormatIPv4(uint32_t addr, char* out) {
  size_t n = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    n += WriteDecimal((addr >> shift) & 0xFF, out + n);
    if (shift != 0) out[n++] = '.';
  }
  return n;
}

size_t FormatIPv6(u128 addr, char* out) {
  if ((addr >> 32) == (kMappedPrefix >> 32)) {
    static const char kHead[] = "::ffff:";
    for (size_t i = 0; i < 7; ++i) out[i] = kHead[i];
    return 7 + FormatIPv4(static_cast<uint32_t>(addr), out + 7);
  }
  unsigned groups[8];
  for (int g = 0; g < 8; ++g) groups[g] = static_cast<unsigned>(addr >> (112 - 16 * g)) & 0xFFFF;
  // RFC 5952 4.2: compress the longest run of two or more zero groups, the first on a tie.
  int best_start = -1, best_len = 1;
  for (int g = 0; g < 8;) {
    if (groups[g] != 0) {
      ++g;
      continue;
    }
    int start = g;
    while (g < 8 && groups[g] == 0) ++g;
    if (g - start > best_len) {
      best_start = start;
      best_len = g - start;
    }
  }
  size_t n = 0;
  for (int g = 0; g < 8; ++g) {
    if (g == best_start) {
      out[n++] = ':';
      out[n++] = ':';
      g += best_len - 1;
      continue;
    }
    if (n > 0 && out[n - 1] != ':') out[n++] = ':';
    n += WriteHexGroup(groups[g], out + n);
  }
  return n;
}

size_t FormatAddress(const ParsedAddress& addr, char* out) {
  if (addr.family == Family::kV4 && !addr.mapped) return FormatIPv4(addr.v4, out);
  return FormatIPv6(addr.family == Family::kV4 ? (kMappedPrefix | addr.v4) : addr.v6, out);
}

size_t FormatRoute(const ParsedAddress& addr, unsigned prefix_len, char* out) {
  size_t n;
  unsigned width = addr.family == Family::kV4 ? 32 : 128;
  if (prefix_len > width) prefix_len = width;
  if (addr.family == Family::kV4) {
    // The route of a mapped address is an IPv4 route: the tables are IPv4 tables.
    uint32_t mask = prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - prefix_len);
    n = FormatIPv4(addr.v4 & mask, out);
  } else {
    u128 mask = prefix_len == 0 ? 0 : ~u128{0} << (128 - prefix_len);
    n = FormatIPv6(addr.v6 & mask, out);
  }
  out[n++] = '/';
  return n + WriteDecimal(prefix_len, out + n);
}

}  // namespace ipr
