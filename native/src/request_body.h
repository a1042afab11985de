// The body of POST /v1/check in the form nearly every client sends:
// {"ip":"<address>"}, with JSON whitespace anywhere between tokens and the
// address in printable ASCII without escapes. For such a body the server
// answers in the same native call that looks the address up; any other body
// (escapes, other keys, a BOM, non-ASCII, not JSON at all) is for the general
// path (UTF-8 decoding and JSON.parse in src/server/api.ts), which alone
// decides errors. So this recognizer only has to be exact about what it
// accepts: every body it accepts, JSON.parse reads as {ip: the same text}.
#pragma once

#include <cstddef>

namespace ipr {

// True when `body` is exactly {"ip":"TEXT"} (JSON whitespace allowed around
// every token); then `ip`/`ip_len` point at TEXT inside `body`.
inline bool SimpleCheckBody(const char* body, size_t n, const char** ip, size_t* ip_len) {
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < n && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r')) ++i;
  };
  auto take = [&](char c) {
    skip_ws();
    if (i >= n || body[i] != c) return false;
    ++i;
    return true;
  };
  if (!take('{') || !take('"') || n - i < 3 || body[i] != 'i' || body[i + 1] != 'p' || body[i + 2] != '"') return false;
  i += 3;
  if (!take(':') || !take('"')) return false;
  size_t start = i;
  // Printable ASCII but the quote and the backslash: no escape to undo, no
  // control character JSON would refuse, no UTF-8 to validate.
  while (i < n && body[i] >= 0x20 && body[i] <= 0x7e && body[i] != '"' && body[i] != '\\') ++i;
  if (i >= n || body[i] != '"') return false;
  *ip = body + start;
  *ip_len = i - start;
  ++i;
  if (!take('}')) return false;
  skip_ws();
  return i == n;
}

}  // namespace ipr
