// From (range, value) lists to a partition of the address space.
//
// A table is a list of prefixes with values. Ranges (first-last) are first
// split into the exact prefixes that cover them. Longest-prefix resolution
// then turns the table into a partition: sorted, disjoint intervals covering
// the whole space, each carrying the value (and length) of the most specific
// prefix that contains it, or kNoValue where no prefix does. Partitions of
// several tables merge into one whose intervals carry a combined value; the
// trie is built from that.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "address.h"

namespace ipr {

constexpr uint32_t kNoValue = 0xFFFFFFFFu;

template <typename K>
constexpr int KeyBits() {
  return sizeof(K) == 4 ? 32 : 128;
}

template <typename K>
struct Prefix {
  K start;
  uint32_t value;
  uint32_t order;  // insertion order: of two equal prefixes, the later wins
  uint8_t len;
  uint16_t source;  // the source that listed it (evidence); fits the padding after `len`
};

template <typename K, typename V = uint32_t>
struct Partition {
  std::vector<K> starts;  // starts[0] == 0, strictly increasing
  std::vector<V> values;
  std::vector<uint8_t> lens;  // length of the prefix that gave the value (0 for kNoValue)

  size_t size() const { return starts.size(); }
  void Append(K start, V value, uint8_t len) {
    if (!values.empty() && values.back() == value && lens.back() == len) return;
    starts.push_back(start);
    values.push_back(value);
    lens.push_back(len);
  }
};

template <typename K>
inline int TrailingZeros(K v) {
  if constexpr (sizeof(K) == 4) {
    return v == 0 ? 32 : __builtin_ctz(v);
  } else {
    uint64_t lo = static_cast<uint64_t>(v), hi = static_cast<uint64_t>(v >> 64);
    if (lo != 0) return __builtin_ctzll(lo);
    return hi == 0 ? 128 : 64 + __builtin_ctzll(hi);
  }
}

template <typename K>
inline int FloorLog2(K v) {  // v > 0
  if constexpr (sizeof(K) == 4) {
    return 31 - __builtin_clz(v);
  } else {
    uint64_t hi = static_cast<uint64_t>(v >> 64);
    if (hi != 0) return 127 - __builtin_clzll(hi);
    return 63 - __builtin_clzll(static_cast<uint64_t>(v));
  }
}

// Calls f(start, len) for the exact prefixes covering first..last (first <=
// last), in address order: the fewest there are.
template <typename K, typename F>
void ForEachRangePrefix(K first, K last, F&& f) {
  constexpr int kBits = KeyBits<K>();
  const K kMax = ~K{0};
  while (true) {
    // The largest aligned block starting at `first` that stays within `last`.
    int size_log2 = TrailingZeros(first);
    if (!(first == 0 && last == kMax)) {
      int fit = FloorLog2(static_cast<K>(last - first + 1));
      size_log2 = std::min(size_log2, fit);
    }
    f(first, static_cast<uint8_t>(kBits - size_log2));
    K block_last = size_log2 == kBits ? kMax : first + ((K{1} << size_log2) - 1);
    if (block_last == last) return;
    first = block_last + 1;
  }
}

// Appends the exact prefixes covering first..last (first <= last).
template <typename K>
void AppendRangePrefixes(K first, K last, uint32_t value, uint32_t order, uint16_t source, std::vector<Prefix<K>>* out) {
  ForEachRangePrefix(first, last, [&](K start, uint8_t len) { out->push_back(Prefix<K>{start, value, order, len, source}); });
}

// Longest-prefix resolution. Sorts `prefixes` in place.
template <typename K>
Partition<K> ResolvePrefixes(std::vector<Prefix<K>>* prefixes) {
  const K kMax = ~K{0};
  std::sort(prefixes->begin(), prefixes->end(), [](const Prefix<K>& a, const Prefix<K>& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.len != b.len) return a.len < b.len;  // containing prefixes first
    return a.order < b.order;
  });
  struct Open {
    K last;
    uint32_t value;
    uint8_t len;
  };
  std::vector<Open> open;  // nested prefixes containing `next`, most specific on top
  Partition<K> out;
  K next = 0;  // every address below `next` has been given its interval
  bool covered_all = false;
  auto close_while = [&](auto&& should_close) {
    while (!open.empty() && should_close(open.back())) {
      Open top = open.back();
      open.pop_back();
      if (covered_all || next > top.last) continue;  // an inner prefix already reached its end
      out.Append(next, top.value, top.len);
      if (top.last == kMax) {
        covered_all = true;
      } else {
        next = top.last + 1;
      }
    }
  };
  for (const Prefix<K>& p : *prefixes) {
    close_while([&](const Open& o) { return o.last < p.start; });
    if (next < p.start) {
      if (open.empty()) {
        out.Append(next, kNoValue, 0);
      } else {
        out.Append(next, open.back().value, open.back().len);
      }
      next = p.start;
    }
    K last = p.len == KeyBits<K>() ? p.start : p.start | (kMax >> p.len);
    open.push_back(Open{last, p.value, p.len});
  }
  close_while([](const Open&) { return true; });
  if (!covered_all) out.Append(next, kNoValue, 0);
  return out;
}

// Overlays partitions. `combine(values, lens)` receives one value and length
// per input partition for an elementary interval and returns its merged
// 64-bit value.
template <typename K, typename Combine>
Partition<K, uint64_t> MergePartitions(const std::vector<const Partition<K>*>& parts, Combine combine) {
  const size_t n = parts.size();
  std::vector<size_t> at(n, 0);
  std::vector<uint32_t> values(n);
  std::vector<uint8_t> lens(n);
  Partition<K, uint64_t> out;
  K point = 0;
  while (true) {
    bool has_next = false;
    K next = 0;
    for (size_t t = 0; t < n; ++t) {
      const Partition<K>& p = *parts[t];
      while (at[t] + 1 < p.size() && p.starts[at[t] + 1] <= point) ++at[t];
      values[t] = p.values[at[t]];
      lens[t] = p.lens[at[t]];
      if (at[t] + 1 < p.size()) {
        K candidate = p.starts[at[t] + 1];
        if (!has_next || candidate < next) next = candidate;
        has_next = true;
      }
    }
    out.Append(point, combine(values.data(), lens.data()), 0);
    if (!has_next) return out;
    point = next;
  }
}

}  // namespace ipr
