// A published snapshot opened for reading.
//
// Open() maps the file, checks it against everything it claims (LMDB meta
// pages, file size, header, format version, checksum, every trie index and
// record offset) and keeps one read transaction for the object's lifetime:
// the blob pointers stay valid, in the memory map, until the Snapshot is
// destroyed. Lookups are then plain memory reads, safe from any thread.
//
// The map is shared with the file, which can be written in place after Open
// checked it (nothing in ipr does; an operator copying over a published file
// can). Lookups therefore stay inside the map whatever its bytes say: the
// tries clamp their indexes (trie.h), and a record id or offsets out of
// range read as no record. Such a snapshot answers wrong, never crashes;
// Verify() tells when the file changed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "address.h"
#include "error_codes.h"
#include "partition.h"
#include "snapshot_format.h"
#include "trie.h"

struct MDB_env;
struct MDB_txn;

namespace ipr {

struct Blob {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// The error of a snapshot that cannot be used, with a message naming the file.
struct SnapshotError {
  ErrorCode code = ErrorCode::kSnapshotInvalid;  // missing, invalid, version or damaged
  std::string message;
};

// What stat says of a file: enough to notice that it was written to.
struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileStamp& o) const { return size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns; }
  bool operator!=(const FileStamp& o) const { return !(*this == o); }
};

class Snapshot {
 public:
  static std::shared_ptr<const Snapshot> Open(const std::string& path, SnapshotError* error);
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  Answer Lookup(const ParsedAddress& addr) const {
    return Unpack(addr.family == Family::kV4 ? trie4_.LookupV4(addr.v4) : trie6_.LookupV6(addr.v6));
  }

  // Looks `n` addresses up with interleaved walks (TrieView::LookupManyV4);
  // out[i] is what Lookup(addrs[i]) answers. Allocates nothing.
  void LookupBatch(const ParsedAddress* addrs, size_t n, Answer* out) const;

  // The answer space of one family (K uint32_t: IPv4, u128: IPv6), for
  // exports: f(start, len, answer) for the fewest prefixes that cover every
  // address, in address order, each with the answer a lookup there gives.
  // Answers that differ only in the length of their ASN route are one here
  // (asn_len 0): an export holds no route. Reads the whole trie: off the
  // lookup path.
  template <typename K, typename F>
  void ForEachAnswerPrefix(F&& f) const {
    const TrieView& trie = sizeof(K) == 4 ? trie4_ : trie6_;
    bool open = false;
    K run_start = 0;
    Answer run{};
    auto flush = [&](K last) {
      ForEachRangePrefix<K>(run_start, last, [&](K start, uint8_t len) { f(start, len, run); });
    };
    trie.ForEachSlot<K>([&](K start, uint64_t value) {
      Answer a = Unpack(value);
      a.asn_len = 0;
      if (open && a.flags == run.flags && a.company == run.company && a.asn == run.asn && a.location == run.location) return;
      if (open) flush(start - 1);
      run = a;
      run_start = start;
      open = true;
    });
    flush(~K{0});
  }

  const std::string& path() const { return path_; }
  const SnapshotHeader& header() const { return header_; }
  Blob meta() const { return meta_; }
  Blob records(RecordKind kind) const { return records_[kind]; }
  // The JSON text of record `id` of `kind`, in the map. Open checked every
  // id a leaf carries and every offset; empty when they were damaged since.
  Blob RecordText(RecordKind kind, uint32_t id) const {
    const uint8_t* offsets = records_[kind].data + kRecordTableHeaderSize;
    uint32_t count = header_.record_counts[kind];
    if (id >= count) return Blob{};
    uint32_t from, to;
    std::memcpy(&from, offsets + 4 * size_t{id}, 4);
    std::memcpy(&to, offsets + 4 * (size_t{id} + 1), 4);
    if (from > to || to > record_bytes_[kind]) return Blob{};
    return Blob{offsets + 4 * (size_t{count} + 1) + from, size_t{to} - from};
  }
  // Why the answer carries its flags: the prefixes of flag sources holding
  // the address, in the tables whose flag `answer` (the address's Lookup)
  // carries, and the asn-list sources that flag its ASN. Sorted by table,
  // most specific prefix first, then source. Off the lookup path: binary
  // searches over the evidence blobs, every index clamped to what Open
  // checked (the map may change after it), so it stays inside the map.
  void Explain(const ParsedAddress& addr, const Answer& answer, std::vector<Evidence>* out) const;

  const TrieView& trie4() const { return trie4_; }
  const TrieView& trie6() const { return trie6_; }
  uint64_t file_size() const { return file_size_; }

  // The mapped file as it is now on disk (the inode that is mapped, even
  // when its name now points to another file).
  FileStamp Stamp() const;
  // The stamp the file had when Open checked it.
  const FileStamp& opened_stamp() const { return opened_stamp_; }
  // Re-checks the file against what Open accepted, after its stamp moved:
  // false with `error` (code snapshot_damaged) when it shrank (reads past its
  // new end fault the process) or its bytes no longer match the checksum.
  // Reads the whole map: call it off the lookup path.
  bool Verify(const FileStamp& now, SnapshotError* error) const;

 private:
  Snapshot() = default;
  bool Load(const std::string& path, SnapshotError* error);
  bool ValidLeaf(uint64_t v, unsigned key_bits) const;

  Answer Unpack(uint64_t v) const {
    uint32_t asn = leaf::Asn(v);
    uint32_t provider = leaf::Provider(v);
    uint32_t company = provider != 0 ? provider - 1 : asn == kNoRecord ? kNoRecord : AsnCompany(asn);
    return Answer{company, asn, leaf::Location(v), leaf::Flags(v), leaf::AsnLen(v)};
  }
  uint32_t AsnCompany(uint32_t asn) const {
    if (asn >= header_.record_counts[kAsnRecords]) return kNoRecord;  // the leaf changed since Open
    uint32_t company;
    std::memcpy(&company, asn_company_.data + 4 * size_t{asn}, 4);
    return company;
  }

  std::string path_;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  uint64_t file_size_ = 0;
  FileStamp opened_stamp_;
  Blob blobs_[kBlobCount];
  SnapshotHeader header_{};
  Blob meta_, asn_company_;
  Blob records_[kRecordKindCount];
  // Bytes of record text in each table (after its offsets).
  uint64_t record_bytes_[kRecordKindCount] = {};
  // The evidence blobs (IPv4, IPv6, ASN) and their entry counts as Open checked them.
  Blob evidence_[3];
  uint32_t evidence_counts_[3] = {};
  TrieView trie4_, trie6_;
};

}  // namespace ipr
