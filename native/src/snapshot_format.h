// The snapshot file: one LMDB environment (a single file, MDB_NOSUBDIR) whose
// main database holds a few large values ("blobs"). LMDB stores each in
// contiguous overflow pages, so a blob is used in place from the memory map.
//
//   "header"       SnapshotHeader: magic, format version, counts, checksum
//   "meta"         JSON text: build time, sources, per-table counts (for `info`)
//   "trie4"        the IPv4 trie (trie.h); its leaves are packed Answers
//   "trie6"        the IPv6 trie
//   "asn.company"  uint32 per ASN record: the company the ASN stands for, or kNoRecord
//   "rec.company"  RecordTable: one JSON object text per company
//   "rec.asn"      RecordTable: one `{"number":N,"name":"..."}` per ASN record
//   "rec.location" RecordTable: one JSON object text per location
//   "rec.source"   RecordTable: one JSON string text per source of the build (its name)
//   "ev.prefix4"   evidence: the IPv4 prefixes flag sources listed, and which source
//   "ev.prefix6"   the same for IPv6
//   "ev.asn"       evidence: the ASN records flagged by asn-list sources, and which source
//
// Evidence answers "why is this address flagged?" (`explain`); lookups never
// read it, so it costs the hot path nothing but file size.
//
// Every blob but "header" is covered, in this order, by the header's checksum.
// All integers are little-endian; nothing assumes alignment.
#pragma once

#include <cstdint>

namespace ipr {

constexpr uint32_t kFormatVersion = 4;
constexpr uint32_t kNoRecord = 0xFFFFFFFFu;

// The tables a snapshot answers from. The first five are flags. Their order
// is TABLES in src/result.ts: the addon reports kTableNames, and
// test/result.test.ts holds the two equal.
enum Table : unsigned { kTor, kVpn, kProxy, kRelay, kHosting, kAsn, kGeo, kTableCount };
constexpr unsigned kFlagTableCount = 5;
constexpr const char* kTableNames[] = {"tor", "vpn", "proxy", "relay", "hosting", "asn", "geo"};
static_assert(sizeof kTableNames / sizeof kTableNames[0] == kTableCount, "one name per table");

enum RecordKind : unsigned { kCompanyRecords, kAsnRecords, kLocationRecords, kSourceRecords, kRecordKindCount };

struct SnapshotHeader {
  char magic[8];  // "IPRSNAP\0"
  uint32_t format_version;
  uint32_t record_counts[kRecordKindCount];
  uint32_t reserved;  // zero
  uint64_t checksum;  // Checksum64 chained over the blobs in kBlobNames order
  uint64_t built_at_ms;
};
static_assert(sizeof(SnapshotHeader) == 48, "SnapshotHeader is part of the file format");

// What a lookup answers for an address, unpacked.
struct Answer {
  uint32_t company;   // record id or kNoRecord
  uint32_t asn;       // record id or kNoRecord
  uint32_t location;  // record id or kNoRecord
  uint8_t flags;      // bit t set: table t (t < kFlagTableCount) lists the address
  uint8_t asn_len;    // prefix length of the ASN table's route
};

// A trie leaf: one Answer packed in 64 bits, so the walk ends on the answer
// itself rather than on an id into a further table (one cache miss less).
//   bits  0-4   flags
//   bits  5-12  ASN route prefix length
//   bits 13-20  provider company: 0 none, else company record id + 1; when
//               none, the company is the ASN's ("asn.company")
//   bits 21-39  ASN record id, all ones for none
//   bits 40-61  location record id, all ones for none
//   bits 62-63  zero
namespace leaf {
constexpr unsigned kProviderBits = 8, kAsnBits = 19, kLocationBits = 22;
constexpr uint32_t kMaxProviders = (1u << kProviderBits) - 1;
constexpr uint32_t kNoAsn = (1u << kAsnBits) - 1;
constexpr uint32_t kNoLocation = (1u << kLocationBits) - 1;

constexpr uint64_t Pack(uint8_t flags, uint8_t asn_len, uint32_t provider, uint32_t asn, uint32_t location) {
  return uint64_t{flags & 0x1Fu} | uint64_t{asn_len} << 5 | uint64_t{provider} << 13 |
         uint64_t{asn == kNoRecord ? kNoAsn : asn} << 21 | uint64_t{location == kNoRecord ? kNoLocation : location} << 40;
}
constexpr uint8_t Flags(uint64_t v) { return static_cast<uint8_t>(v & 0x1F); }
constexpr uint8_t AsnLen(uint64_t v) { return static_cast<uint8_t>(v >> 5); }
constexpr uint32_t Provider(uint64_t v) { return static_cast<uint32_t>(v >> 13) & kMaxProviders; }
constexpr uint32_t Asn(uint64_t v) {
  uint32_t a = static_cast<uint32_t>(v >> 21) & kNoAsn;
  return a == kNoAsn ? kNoRecord : a;
}
constexpr uint32_t Location(uint64_t v) {
  uint32_t l = static_cast<uint32_t>(v >> 40) & kNoLocation;
  return l == kNoLocation ? kNoRecord : l;
}
constexpr bool ReservedClear(uint64_t v) { return (v >> 62) == 0; }
constexpr uint64_t kNothing = Pack(0, 0, 0, kNoRecord, kNoRecord);
}  // namespace leaf

// RecordTable blob: "REC1", uint32 count, uint32 offsets[count + 1], then the
// bytes; record i is bytes[offsets[i], offsets[i + 1]), printable ASCII.
constexpr uint32_t kRecordTableHeaderSize = 8;

// Evidence blobs ("ev.prefix4", "ev.prefix6"): "EVP1", uint32 count, then
// uint32 first[key_bits + 2], where the entries of the prefixes of length L
// are [first[L], first[L + 1]) (first[0] == 0, first[key_bits + 1] ==
// count), then `count` entries: the prefix's first address (uint32 or
// 128 bits, little-endian, no bit set past the length), uint16 source (a
// kSourceRecords id), uint8 table (a flag table), uint8 zero. Within a
// length, entries are sorted by address, table, source, none twice.
// "ev.asn": "EVA1", uint32 count, then `count` entries of uint32 ASN record
// id, uint16 source, uint8 table, uint8 zero, sorted, none twice.
constexpr uint32_t kEvidenceHeaderSize = 8;
constexpr size_t kEvidenceV4Size = 8, kEvidenceV6Size = 20, kEvidenceAsnSize = 8;

// One entry of an address's evidence: `source` listed, in flag table
// `table`, the prefix of `len` bits holding the address; `by_asn`: the
// source listed the address's ASN, and `len` is the ASN's route.
struct Evidence {
  uint8_t table;
  uint8_t len;
  bool by_asn;
  uint32_t source;
};

constexpr const char* kBlobNames[] = {"meta",       "trie4",      "trie6",      "asn.company", "rec.company", "rec.asn",
                                      "rec.location", "rec.source", "ev.prefix4", "ev.prefix6", "ev.asn"};
constexpr unsigned kBlobCount = 11;
constexpr unsigned kFirstRecordBlob = 4;
constexpr unsigned kFirstEvidenceBlob = kFirstRecordBlob + kRecordKindCount;

}  // namespace ipr
