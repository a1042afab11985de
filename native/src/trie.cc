#include "trie.h"

#include <stdexcept>

namespace ipr {
namespace {

template <typename K, int kKeyBits>
class TrieBuilder {
 public:
  TrieBuilder(const std::vector<K>& starts, const std::vector<uint64_t>& values)
      : starts_(starts), values_(values), n_(starts.size()) {
    if (n_ == 0 || starts[0] != 0 || values.size() != n_) {
      throw std::invalid_argument("trie builder: the intervals must partition the key space");
    }
  }

  std::vector<uint8_t> Build() {
    constexpr int kDirectBits = DirectBits(kKeyBits);
    constexpr size_t kDirectSize = size_t{1} << kDirectBits;
    std::vector<uint32_t> direct(kDirectSize);
    size_t j = 0;
    constexpr int kBelow = kKeyBits - kDirectBits;
    for (size_t d = 0; d < kDirectSize; ++d) {
      K start = static_cast<K>(d) << kBelow;
      K last = start + ((K{1} << kBelow) - 1);
      j = Seek(j, start);
      if (End(j) >= last) {
        // Neighbouring blocks with one value share one leaf.
        if (leaves_.empty() || leaves_.back() != values_[j] || !last_was_direct_leaf) leaves_.push_back(values_[j]);
        direct[d] = kDirectLeaf | Count31(leaves_.size() - 1);
        last_was_direct_leaf = true;
      } else {
        last_was_direct_leaf = false;
        uint32_t index = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
        direct[d] = index;
        BuildNode(index, start, kDirectBits, j);
      }
    }

    TrieHeader header{};
    std::memcpy(header.magic, "TRI3", 4);
    header.key_bits = kKeyBits;
    header.direct_bits = kDirectBits;
    header.stride = kStride;
    header.node_count = Count31(nodes_.size());
    header.leaf_count = Count31(leaves_.size());
    size_t direct_end = sizeof header + 4 * kDirectSize;
    size_t nodes_offset = direct_end + (64 - (kBlobMapOffset + direct_end) % 64) % 64;
    header.nodes_offset = static_cast<uint32_t>(nodes_offset);

    std::vector<uint8_t> blob(nodes_offset + sizeof(TrieNode) * nodes_.size() + 8 * leaves_.size());
    uint8_t* p = blob.data();
    std::memcpy(p, &header, sizeof header);
    std::memcpy(p + sizeof header, direct.data(), 4 * kDirectSize);
    p += nodes_offset;
    if (!nodes_.empty()) std::memcpy(p, nodes_.data(), sizeof(TrieNode) * nodes_.size());
    p += sizeof(TrieNode) * nodes_.size();
    if (!leaves_.empty()) std::memcpy(p, leaves_.data(), 8 * leaves_.size());
    return blob;
  }

 private:
  // Node and leaf indexes stay below 2^31: bit 31 of a direct entry tells them apart.
  static uint32_t Count31(size_t n) {
    if (n >= kDirectLeaf) throw std::length_error("trie builder: trie too large");
    return static_cast<uint32_t>(n);
  }

  K End(size_t i) const { return i + 1 < n_ ? starts_[i + 1] - 1 : ~K{0}; }

  // Moves j forward to the interval that contains p (p never goes backwards).
  size_t Seek(size_t j, K p) const {
    while (j + 1 < n_ && starts_[j + 1] <= p) ++j;
    return j;
  }

  // Fills node `index`, which covers the block of 2^(kKeyBits - offset)
  // addresses from `base`; interval j contains `base`.
  void BuildNode(uint32_t index, K base, int offset, size_t j) {
    struct Slot {
      bool child;
      uint64_t value;
      size_t interval;
      K start;
    };
    Slot slots[64];
    int remaining = kKeyBits - offset;
    int child_count = 0;
    for (unsigned s = 0; s < 64; ++s) {
      if (remaining >= kStride) {
        int shift = remaining - kStride;
        K start = base + (static_cast<K>(s) << shift);
        K last = start + ((K{1} << shift) - 1);
        j = Seek(j, start);
        bool child = End(j) < last;
        slots[s] = Slot{child, values_[j], j, start};
        child_count += child;
      } else {
        // The last stride reaches past the address: slot s stands for address
        // base + (s >> padding); the slots between are never looked up and
        // repeat their neighbour's value so they cost no leaf.
        K start = base + (static_cast<K>(s) >> (kStride - remaining));
        j = Seek(j, start);
        slots[s] = Slot{false, values_[j], j, start};
      }
    }

    TrieNode node{};
    node.child_base = Count31(nodes_.size());
    node.leaf_base = Count31(leaves_.size());
    bool have_leaf = false;
    uint64_t previous = 0;
    for (unsigned s = 0; s < 64; ++s) {
      if (slots[s].child) {
        node.children |= uint64_t{1} << s;
      } else if (!have_leaf || slots[s].value != previous) {
        node.leaf_starts |= uint64_t{1} << s;
        leaves_.push_back(slots[s].value);
        previous = slots[s].value;
        have_leaf = true;
      }
    }
    nodes_.resize(nodes_.size() + static_cast<size_t>(child_count));
    nodes_[index] = node;
    uint32_t child = node.child_base;
    for (unsigned s = 0; s < 64; ++s) {
      if (slots[s].child) BuildNode(child++, slots[s].start, offset + kStride, slots[s].interval);
    }
  }

  const std::vector<K>& starts_;
  const std::vector<uint64_t>& values_;
  size_t n_;
  std::vector<TrieNode> nodes_;
  std::vector<uint64_t> leaves_;
  bool last_was_direct_leaf = false;
};

}  // namespace

bool TrieView::Validate(const uint8_t* data, size_t size, unsigned key_bits, std::string* error) {
  TrieHeader header;
  if (size < sizeof header) {
    *error = "trie blob shorter than its header";
    return false;
  }
  std::memcpy(&header, data, sizeof header);
  if (std::memcmp(header.magic, "TRI3", 4) != 0 || header.key_bits != key_bits ||
      header.direct_bits != DirectBits(key_bits) || header.stride != kStride) {
    *error = "trie header does not describe a " + std::to_string(key_bits) + "-bit trie of this format";
    return false;
  }
  if (header.leaf_count == 0) {
    *error = "trie has no leaves";
    return false;
  }
  direct_bits_ = header.direct_bits;
  const size_t direct_size = size_t{1} << direct_bits_;
  if (header.nodes_offset < sizeof header + 4 * uint64_t{direct_size} ||
      header.nodes_offset > sizeof header + 4 * uint64_t{direct_size} + 63) {
    *error = "trie nodes offset out of range";
    return false;
  }
  uint64_t expected = header.nodes_offset + sizeof(TrieNode) * uint64_t{header.node_count} +
                      8 * uint64_t{header.leaf_count};
  if (expected != size) {
    *error = "trie blob size " + std::to_string(size) + " does not match its header (" + std::to_string(expected) +
             ")";
    return false;
  }
  direct_ = data + sizeof header;
  nodes_ = data + header.nodes_offset;
  leaves_ = nodes_ + sizeof(TrieNode) * header.node_count;
  node_count_ = header.node_count;
  leaf_count_ = header.leaf_count;
  max_levels_ = (static_cast<int>(key_bits) - direct_bits_ + kStride - 1) / kStride;

  for (size_t d = 0; d < direct_size; ++d) {
    uint32_t e = Load32(direct_ + 4 * d);
    bool ok = (e & kDirectLeaf) ? (e & ~kDirectLeaf) < leaf_count_ : e < node_count_;
    if (!ok) {
      *error = "trie direct entry " + std::to_string(d) + " out of range";
      return false;
    }
  }
  for (uint32_t i = 0; i < node_count_; ++i) {
    TrieNode node;
    std::memcpy(&node, nodes_ + sizeof(TrieNode) * i, sizeof node);
    uint64_t children = static_cast<uint64_t>(__builtin_popcountll(node.children));
    uint64_t runs = static_cast<uint64_t>(__builtin_popcountll(node.leaf_starts));
    bool ok = uint64_t{node.child_base} + children <= node_count_ &&
              (children == 0 || node.child_base > i) && uint64_t{node.leaf_base} + runs <= leaf_count_;
    if (ok && node.children != ~uint64_t{0}) {
      // The first leaf slot must open a run, or a lookup there would index run -1.
      unsigned first_leaf = static_cast<unsigned>(__builtin_ctzll(~node.children));
      ok = (node.leaf_starts & ((uint64_t{2} << first_leaf) - 1)) != 0;
    }
    if (!ok) {
      *error = "trie node " + std::to_string(i) + " out of range";
      return false;
    }
  }
  return true;
}

template <typename K, int kKeyBits>
void TrieView::WalkGroup(const K* keys, size_t n, uint64_t* values) const {
  uint32_t index[kGroup];  // the node a lane reads next, or its leaf once done walking
  bool at_leaf[kGroup];
  bool walking = false;
  for (size_t i = 0; i < n; ++i) {
    uint32_t entry = Load32(direct_ + 4 * static_cast<size_t>(keys[i] >> (kKeyBits - direct_bits_)));
    at_leaf[i] = (entry & kDirectLeaf) != 0;
    index[i] = entry & ~kDirectLeaf;
    walking |= !at_leaf[i];
    __builtin_prefetch(at_leaf[i] ? leaves_ + 8 * size_t{index[i]} : nodes_ + sizeof(TrieNode) * size_t{index[i]});
  }
  int offset = direct_bits_;
  for (int level = 0; walking && level < max_levels_; ++level, offset += kStride) {
    walking = false;
    for (size_t i = 0; i < n; ++i) {
      if (at_leaf[i]) continue;
      if (index[i] >= node_count_) {  // damaged after Validate (trie.h): end on leaf 0
        index[i] = 0;
        at_leaf[i] = true;
        continue;
      }
      TrieNode node;
      std::memcpy(&node, nodes_ + sizeof(TrieNode) * size_t{index[i]}, sizeof node);
      unsigned slot = static_cast<unsigned>((keys[i] << offset) >> (kKeyBits - kStride));
      uint64_t upto = (uint64_t{2} << slot) - 1;
      if (node.children & (uint64_t{1} << slot)) {
        index[i] = node.child_base + static_cast<uint32_t>(__builtin_popcountll(node.children & upto)) - 1;
        __builtin_prefetch(nodes_ + sizeof(TrieNode) * size_t{index[i]});
        walking = true;
      } else {
        index[i] = node.leaf_base + static_cast<uint32_t>(__builtin_popcountll(node.leaf_starts & upto)) - 1;
        __builtin_prefetch(leaves_ + 8 * size_t{index[i]});
        at_leaf[i] = true;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // A lane still at a node went deeper than the key: unreachable in a validated trie.
    values[i] = LeafAt(at_leaf[i] ? index[i] : 0);
  }
}

void TrieView::LookupManyV4(const uint32_t* addrs, size_t n, uint64_t* values) const {
  uint64_t keys[kGroup];  // left-aligned in 64 bits, as Walk takes them
  for (size_t base = 0; base < n; base += kGroup) {
    size_t count = n - base < kGroup ? n - base : kGroup;
    for (size_t i = 0; i < count; ++i) keys[i] = uint64_t{addrs[base + i]} << 32;
    WalkGroup<uint64_t, 64>(keys, count, values + base);
  }
}

void TrieView::LookupManyV6(const u128* addrs, size_t n, uint64_t* values) const {
  for (size_t base = 0; base < n; base += kGroup) {
    WalkGroup<u128, 128>(addrs + base, n - base < kGroup ? n - base : kGroup, values + base);
  }
}

std::vector<uint32_t> TrieView::SubdividedBlocks() const {
  std::vector<uint32_t> blocks;
  for (uint32_t d = 0; d < (1u << direct_bits_); ++d) {
    if (!(Load32(direct_ + 4 * size_t{d}) & kDirectLeaf)) blocks.push_back(d);
  }
  return blocks;
}

std::vector<uint8_t> BuildTrieV4(const std::vector<uint32_t>& starts, const std::vector<uint64_t>& values) {
  return TrieBuilder<uint32_t, 32>(starts, values).Build();
}

std::vector<uint8_t> BuildTrieV6(const std::vector<u128>& starts, const std::vector<uint64_t>& values) {
  return TrieBuilder<u128, 128>(starts, values).Build();
}

}  // namespace ipr
