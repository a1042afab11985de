// A multibit trie for longest-prefix matching, read in place from a mapped blob.
//
// Shape (after Poptrie, Asai & Ohara 2015): the top DirectBits(key width) bits
// of the key index a flat array (18 for IPv4: 1 MiB that stays in L2 and
// resolves /24 boundaries at the first node; 16 for the sparse IPv6 space);
// below it every node consumes kStride = 6 bits and holds two
// 64-bit maps. Bit i of `children` says slot i continues into a child node;
// bit i of `leaf_starts` marks the first slot of a run of leaf slots that share
// one value (runs skip over child slots). Children of one node are contiguous,
// and so are its leaves, so a slot's index is a popcount away. Leaf values are
// opaque 64-bit words (the snapshot's packed answers).
//
// Blob layout, little-endian (reads go through memcpy, so any alignment works):
//   TrieHeader (32 bytes)
//   uint32 direct[1 << direct_bits]   bit 31 set: a leaf index; else a node index
//   zero padding up to nodes_offset
//   TrieNode nodes[node_count]        32 bytes each, from nodes_offset
//   uint64 leaves[leaf_count]         right after the nodes
// The writer picks nodes_offset so that, where LMDB places the blob in the
// map (kBlobMapOffset into a page), every node sits inside one cache line:
// a node read is one miss, not two.
//
// A blob is untrusted until Validate() accepts it: after that every index a
// lookup can follow is in bounds. The blob is read from a shared file
// mapping, though, and a mapped file can still be written in place after it
// was validated (an operator copying over a published snapshot): so a walk
// also clamps every node and leaf index it reads, one compare each. A
// damaged trie then answers wrong leaves (the snapshot checks their record
// ids), never reads outside the blob.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "address.h"

namespace ipr {

constexpr int kStride = 6;
constexpr int DirectBits(unsigned key_bits) { return key_bits == 32 ? 18 : 20; }
constexpr uint32_t kDirectLeaf = 0x80000000u;

struct TrieHeader {
  char magic[4];  // "TRI3"
  uint8_t key_bits;  // 32 or 128
  uint8_t direct_bits;
  uint8_t stride;
  uint8_t reserved0;
  uint32_t node_count;
  uint32_t leaf_count;
  uint32_t nodes_offset;  // bytes from the blob's start
  uint32_t reserved[3];
};
static_assert(sizeof(TrieHeader) == 32, "TrieHeader is part of the file format");

struct TrieNode {
  uint64_t children;
  uint64_t leaf_starts;
  uint32_t leaf_base;
  uint32_t child_base;
  uint64_t reserved;  // pads the node to 32 bytes: two per cache line, none across two
};
static_assert(sizeof(TrieNode) == 32, "TrieNode is part of the file format");

// Where LMDB puts a value stored in overflow pages: this many bytes into its
// first page (the page header of the liblmdb the lmdb package ships). The
// writer aligns trie nodes for it; native/bench/lookup_bench.cc refuses a
// snapshot whose nodes are not.
constexpr size_t kBlobMapOffset = 24;

// A validated view of a trie blob. It does not own the bytes: they live in the
// snapshot's memory map and must outlive the view.
class TrieView {
 public:
  // Checks the header, the size and every index in the blob (not the leaf
  // values: they mean nothing to the trie). On failure returns false with a
  // reason in `error`.
  bool Validate(const uint8_t* data, size_t size, unsigned key_bits, std::string* error);

  uint64_t LookupV4(uint32_t addr) const { return Walk<uint64_t, 64>(uint64_t{addr} << 32); }
  // The node array, for the alignment check.
  const uint8_t* nodes() const { return nodes_; }
  uint64_t LookupV6(u128 addr) const { return Walk<u128, 128>(addr); }

  // Lookups walked kGroup at a time, level by level: each pass issues the
  // memory reads of every lane before using any, so their cache misses
  // overlap instead of queueing. values[i] is what the single lookup of
  // addrs[i] answers. 64 lanes measured best (native bench, IPv6: 16 lanes
  // 19.5 M/s, 32 20.0, 64 22.8, 128 23.2, 256 22.6; IPv4 32.6 at 16, 39.8 at
  // 64); a walk that refills each lane as it ends measured slower still (17.6).
  static constexpr size_t kGroup = 64;
  void LookupManyV4(const uint32_t* addrs, size_t n, uint64_t* values) const;
  void LookupManyV6(const u128* addrs, size_t n, uint64_t* values) const;

  // The top-level blocks (values of the first direct_bits()) that hold more
  // than one answer; for benchmarks that want addresses where the data is.
  std::vector<uint32_t> SubdividedBlocks() const;
  int direct_bits() const { return direct_bits_; }

  // Visits the partition the trie encodes, in key order: f(start, value) for
  // every direct entry and node slot that ends a walk, with the first key it
  // covers and the leaf a lookup there answers. Consecutive calls may carry
  // one value (the trie's shape cuts runs). For exports, off the lookup path;
  // K is uint32_t for a 32-bit trie, u128 for a 128-bit one.
  template <typename K, typename F>
  void ForEachSlot(F&& f) const {
    constexpr int kBits = static_cast<int>(8 * sizeof(K));
    for (size_t d = 0; d < (size_t{1} << direct_bits_); ++d) {
      uint32_t entry = Load32(direct_ + 4 * d);
      K start = static_cast<K>(d) << (kBits - direct_bits_);
      if (entry & kDirectLeaf) {
        f(start, LeafAt(entry & ~kDirectLeaf));
      } else {
        VisitSlots<K>(entry, start, direct_bits_, f);
      }
    }
  }

  uint32_t node_count() const { return node_count_; }
  uint32_t leaf_count() const { return leaf_count_; }
  uint64_t leaf(uint32_t i) const { return Load64(leaves_ + 8 * size_t{i}); }
  // Leaf `i`, or leaf 0 when `i` is out of range (only in a trie damaged after Validate).
  uint64_t LeafAt(size_t i) const { return Load64(leaves_ + 8 * (i < leaf_count_ ? i : 0)); }

 private:
  static uint32_t Load32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static uint64_t Load64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

  // Key is left-aligned in K (its first bit is K's top bit); bits beyond the
  // address are zero, which is what the last, partial stride expects.
  template <typename K, int kKeyBits>
  uint64_t Walk(K key) const {
    uint32_t entry = Load32(direct_ + 4 * static_cast<size_t>(key >> (kKeyBits - direct_bits_)));
    if (entry & kDirectLeaf) return LeafAt(entry & ~kDirectLeaf);
    uint32_t index = entry;
    int offset = direct_bits_;
    for (int level = 0; level < max_levels_; ++level, offset += kStride) {
      index = index < node_count_ ? index : 0;  // damaged after Validate (see the top of this file): stay in the blob
      TrieNode node;
      std::memcpy(&node, nodes_ + sizeof(TrieNode) * static_cast<size_t>(index), sizeof node);
      unsigned slot = static_cast<unsigned>((key << offset) >> (kKeyBits - kStride));
      uint64_t upto = (uint64_t{2} << slot) - 1;  // slots 0..slot; wraps to all ones at 63
      if (node.children & (uint64_t{1} << slot)) {
        index = node.child_base + static_cast<uint32_t>(__builtin_popcountll(node.children & upto)) - 1;
        continue;
      }
      size_t leaf = node.leaf_base + static_cast<size_t>(__builtin_popcountll(node.leaf_starts & upto)) - 1;
      return LeafAt(leaf);
    }
    return Load64(leaves_);  // deeper than the key: unreachable in a validated trie
  }

  // The slots of node `index`, which covers the keys from `base` below its
  // first `offset` bits. Answers exactly what Walk answers for each slot,
  // clamps and all.
  template <typename K, typename F>
  void VisitSlots(uint32_t index, K base, int offset, F& f) const {
    constexpr int kBits = static_cast<int>(8 * sizeof(K));
    index = index < node_count_ ? index : 0;
    TrieNode node;
    std::memcpy(&node, nodes_ + sizeof(TrieNode) * static_cast<size_t>(index), sizeof node);
    const int remaining = kBits - offset;
    // In the last, partial stride slot s stands for key base + (s >> padding);
    // the slots between repeat their neighbour and are never looked up.
    const int padding = remaining >= kStride ? 0 : kStride - remaining;
    for (unsigned s = 0; s < 64; s += 1u << padding) {
      K start = padding == 0 ? base + (static_cast<K>(s) << (remaining - kStride)) : base + (static_cast<K>(s) >> padding);
      uint64_t upto = (uint64_t{2} << s) - 1;
      if (node.children & (uint64_t{1} << s)) {
        uint32_t child = node.child_base + static_cast<uint32_t>(__builtin_popcountll(node.children & upto)) - 1;
        if (remaining > kStride) {
          VisitSlots<K>(child, start, offset + kStride, f);
        } else {
          f(start, Load64(leaves_));  // a child deeper than the key: Walk's unreachable end
        }
      } else {
        f(start, LeafAt(node.leaf_base + static_cast<size_t>(__builtin_popcountll(node.leaf_starts & upto)) - 1));
      }
    }
  }

  template <typename K, int kKeyBits>
  void WalkGroup(const K* keys, size_t n, uint64_t* values) const;

  const uint8_t* direct_ = nullptr;
  const uint8_t* nodes_ = nullptr;
  const uint8_t* leaves_ = nullptr;
  uint32_t node_count_ = 0;
  uint32_t leaf_count_ = 0;
  int direct_bits_ = 0;
  int max_levels_ = 0;
};

// Builds a trie blob from a partition of the whole key space: interval i runs
// from starts[i] to starts[i + 1] - 1 (the last to the top of the space) and
// maps to values[i]. starts[0] must be 0 and starts strictly increasing.
std::vector<uint8_t> BuildTrieV4(const std::vector<uint32_t>& starts, const std::vector<uint64_t>& values);
std::vector<uint8_t> BuildTrieV6(const std::vector<u128>& starts, const std::vector<uint64_t>& values);

}  // namespace ipr
