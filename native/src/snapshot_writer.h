// Builds a snapshot file from (range, value) lists.
//
// Feed the tables with AddRanges (any order, any overlap: within a table the
// most specific prefix wins, and of two equal prefixes the later one), give
// the records, per-ASN attributes and ASN evidence, Compile(), then Write() a
// new file. Every prefix of a flag table is also kept as evidence, with the
// source that listed it. The
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
  // ones, the lowest company ids) or kNoRecord. `sources` (a kSourceRecords id
  // per range) says which source listed each. Throws std::invalid_argument
  // on a range whose end is below its start.
  void AddRanges(Table table, Family family, const uint8_t* starts, const uint8_t* ends, const uint32_t* values,
                 const uint16_t* sources, size_t count);

  // Per ASN record: flag bits every address of that ASN gets (the ASN lists),
  // and the company the ASN stands for (or kNoRecord).
  void SetAsnAttributes(std::vector<uint8_t> flags, std::vector<uint32_t> companies);

  // Which asn-list sources flag each ASN record: entry i says source
  // sources[i] gave ASN record records[i] the flag of table tables[i] (a flag
  // table whose bit SetAsnAttributes set for that record).
  void SetAsnEvidence(std::vector<uint32_t> records, std::vector<uint16_t> sources, std::vector<uint8_t> tables);

  // The ASN record each address will answer (kNoRecord for none): `count`
  // addresses of the family's width in network order. Resolves the family's
  // ASN table; no ASN range may be added to it afterwards.
  std::vector<uint32_t> AsnRecordsOf(Family family, const uint8_t* addresses, size_t count);

  // Per ASN record id, how many IPv4 addresses answer it (resolves the IPv4 ASN table).
  std::vector<uint64_t> AsnV4AddressCounts();

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
    std::vector<uint8_t> evidence;  // the "ev.prefix" blob
    Partition<K> asn;               // the ASN table resolved, once asked for (AsnPartition)
    bool asn_resolved = false;
  };

  template <typename K>
  Partition<K>& AsnPartition(Family_<K>* family, int index);

  template <typename K>
  Partition<K, uint64_t> MergeFamily(Family_<K>* family, int index);
  std::vector<uint8_t> AsnEvidenceBlob() const;
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
  std::vector<uint32_t> asn_evidence_records_;
  std::vector<uint16_t> asn_evidence_sources_;
  std::vector<uint8_t> asn_evidence_tables_;
  std::vector<uint8_t> asn_evidence_;  // the "ev.asn" blob, made by Compile
  Records records_[kRecordKindCount];
  CompileStats stats_;
  bool compiled_ = false;
};

}  // namespace ipr
