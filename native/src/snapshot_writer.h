// Builds a snapshot file from (range, value) lists.
//
// Feed the tables with AddRanges (any order, any overlap: within a table the
// most specific prefix wins, and of two equal prefixes the later one), give
// the records and per-ASN attributes, Compile(), then Write() a new file. The
// caller publishes the file (see src/pipeline/publish.ts); this class never touches a
// published snapshot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "address.h"
#include "partition.h"
#include "snapshot_format.h"

namespace ipr {

struct TableStats {
  uint64_t ranges[2] = {0, 0};    // added, per family (0: IPv4, 1: IPv6)
  uint64_t prefixes[2] = {0, 0};  // after splitting ranges into exact prefixes
};

struct CompileStats {
  TableStats tables[kTableCount];
  uint64_t intervals[2] = {0, 0};  // runs of one answer along the address space
  uint64_t nodes[2] = {0, 0};
  uint64_t leaves[2] = {0, 0};
  uint64_t trie_bytes[2] = {0, 0};
};

class SnapshotWriter {
 public:
  // `starts`/`ends` hold `count` addresses of 4 (IPv4) or 16 (IPv6) bytes in
  // network order; values are record ids (ASN, location) or, for the flag
  // tables, a company id (a "provider": at most leaf::kMaxProviders distinct
  // ones, the lowest company ids) or kNoRecord. Throws std::invalid_argument
  // on a range whose end is below its start.
  void AddRanges(Table table, Family family, const uint8_t* starts, const uint8_t* ends, const uint32_t* values,
                 size_t count);

  // Per ASN record: flag bits every address of that ASN gets (the ASN lists),
  // and the company the ASN stands for (or kNoRecord).
  void SetAsnAttributes(std::vector<uint8_t> flags, std::vector<uint32_t> companies);

  // A record table: `count` JSON texts, record i = bytes[offsets[i], offsets[i+1]).
  void SetRecords(RecordKind kind, std::vector<uint8_t> bytes, std::vector<uint32_t> offsets);

  // Resolves, overlays and compiles every table. Throws std::invalid_argument
  // when a value points past its record table.
  const CompileStats& Compile();

  // Writes the compiled snapshot as a new LMDB file at `path` (which must not
  // exist) and syncs it to disk. Throws std::runtime_error naming the file.
  void Write(const std::string& path, const std::string& meta_json, uint64_t built_at_ms);

 private:
  template <typename K>
  struct Family_ {
    std::vector<Prefix<K>> prefixes[kTableCount];
    std::vector<uint8_t> trie;
  };

  template <typename K>
  Partition<K, uint64_t> MergeFamily(Family_<K>* family, int index);
  uint32_t record_count(RecordKind kind) const {
    return records_[kind].offsets.empty() ? 0 : static_cast<uint32_t>(records_[kind].offsets.size() - 1);
  }

  struct Records {
    std::vector<uint8_t> bytes;
    std::vector<uint32_t> offsets;
  };

  Family_<uint32_t> v4_;
  Family_<u128> v6_;
  uint32_t order_ = 0;
  std::vector<uint8_t> asn_flags_;
  std::vector<uint32_t> asn_companies_;
  Records records_[kRecordKindCount];
  CompileStats stats_;
  bool compiled_ = false;
};

}  // namespace ipr
