#include "snapshot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <tuple>
#include <vector>

#include "checksum.h"
#include "lmdb.h"
#include "partition.h"

namespace ipr {
namespace {

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// LMDB's pages, as the liblmdb of the lmdb package lays them out. A page
// starts with a 24-byte header: flags at 18, then the lower and upper bounds
// of its free space. A meta page goes on with MDB_meta: magic, version, map
// address and size, then two 48-byte database records (free pages, main
// tree); the first field of the free one is the page size, the main one has
// its flags at 4 and its root page number at 40. A leaf page goes on with one
// uint16 per node: the node's offset from the end of the header. A node is
// its data size (two uint16), flags, key size, the key, then the data or, for
// a large value, 24 bytes: its first overflow page's number, a transaction id
// and its page count.
namespace lmdb {
constexpr size_t kHeaderSize = 24, kFlagsAt = 18, kLowerAt = 20, kUpperAt = 22;
constexpr uint16_t kBranchPage = 0x01, kLeafPage = 0x02, kMetaPage = 0x08;
constexpr size_t kMagicAt = 24, kVersionAt = 28, kMapSizeAt = 40, kPageSizeAt = 48, kMainFlagsAt = 100, kMainRootAt = 136,
                 kLastPageAt = 144;
constexpr uint32_t kMagic = 0xBEEFC0DE, kDataVersion = 2;
constexpr uint64_t kNoPage = ~uint64_t{0};
constexpr size_t kNodeHeaderSize = 8, kOverflowRefSize = 24;
constexpr uint16_t kBigData = 0x01;
}  // namespace lmdb

bool ReadAt(int fd, uint8_t* out, size_t size, uint64_t at) {
  return ::pread(fd, out, size, static_cast<off_t>(at)) == static_cast<ssize_t>(size);
}

// A leaf page whose every node, key and data lie inside it.
bool LeafPageSound(const uint8_t* page, uint32_t page_size) {
  using namespace lmdb;
  uint16_t lower = Load16(page + kLowerAt), upper = Load16(page + kUpperAt);
  if (Load16(page + kFlagsAt) != kLeafPage || lower == 0 || lower % 2 != 0 || lower > upper ||
      kHeaderSize + upper > page_size) {
    return false;
  }
  for (unsigned i = 0; i < lower / 2u; ++i) {
    uint64_t at = kHeaderSize + Load16(page + kHeaderSize + 2 * i);
    if (at % 2 != 0 || at + kNodeHeaderSize > page_size) return false;
    const uint8_t* node = page + at;
    uint16_t flags = Load16(node + 4);
    if ((flags & ~kBigData) != 0) return false;
    uint64_t data = flags == kBigData ? kOverflowRefSize : (Load16(node) | uint64_t{Load16(node + 2)} << 16);
    if (at + kNodeHeaderSize + Load16(node + 6) + data > page_size) return false;
  }
  return true;
}

// A root page LMDB can use: a sound leaf page, or a branch page whose every
// node lies inside it and names, as its child, a sound leaf page inside the
// file (`page` is overwritten by the children).
bool RootPageSound(int fd, std::vector<uint8_t>* page, uint32_t page_size, uint64_t file_pages) {
  using namespace lmdb;
  const uint8_t* p = page->data();
  if (Load16(p + kFlagsAt) != kBranchPage) return LeafPageSound(p, page_size);
  uint16_t lower = Load16(p + kLowerAt), upper = Load16(p + kUpperAt);
  if (lower == 0 || lower % 2 != 0 || lower > upper || kHeaderSize + upper > page_size) return false;
  // A branch node: the child's page number in its first six bytes, then its key size and key.
  std::vector<uint64_t> children;
  for (unsigned i = 0; i < lower / 2u; ++i) {
    uint64_t at = kHeaderSize + Load16(p + kHeaderSize + 2 * i);
    if (at % 2 != 0 || at + kNodeHeaderSize > page_size || at + kNodeHeaderSize + Load16(p + at + 6) > page_size) return false;
    uint64_t child = Load16(p + at) | uint64_t{Load16(p + at + 2)} << 16 | uint64_t{Load16(p + at + 4)} << 32;
    if (child < 2 || child >= file_pages) return false;
    children.push_back(child);
  }
  for (uint64_t child : children) {
    if (!ReadAt(fd, page->data(), page_size, child * page_size) || !LeafPageSound(page->data(), page_size)) return false;
  }
  return true;
}

// LMDB trusts the pages it reads. It checks the magic and version of the
// first meta page only, takes the page size from whichever meta page has the
// higher transaction id and divides by it before checking anything else (a
// meta page overwritten by another page raised SIGFPE); and it walks its tree
// as the pages say: a root page flagged as a branch sent it to pages near the
// end of the file and read past it (SIGBUS), odd node offsets made it read
// misaligned nodes. A snapshot's main tree holds twelve entries: one leaf
// page, or, when the values small enough to be kept in the tree (a small
// build's metadata and record tables) fill more than a page, a branch page
// over leaf pages. That is all this accepts: both meta pages sound, with one
// page size, the main tree without flags and its root such a page inside the
// file, every node inside its page. LMDB then reads nothing for a key beyond
// those pages and the overflow page numbers it checks itself. Empty when
// sound.
std::string CheckLmdbPages(const std::string& path, uint64_t file_size) {
  using namespace lmdb;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot be read";
  uint8_t meta[2][kLastPageAt + 8];
  uint32_t page_size = 0;
  std::string problem;
  for (int i = 0; i < 2 && problem.empty(); ++i) {
    // LMDB reads the second meta page one page size (the first's) after the first.
    if (!ReadAt(fd, meta[i], sizeof meta[i], uint64_t{page_size} * static_cast<unsigned>(i))) {
      problem = "too short for LMDB's meta pages";
      break;
    }
    uint32_t size = Load32(meta[i] + kPageSizeAt);
    // Page sizes LMDB writes: the OS page size, 4 KiB to 64 KiB.
    bool size_ok = size >= 4096 && size <= 65536 && (size & (size - 1)) == 0 && (i == 0 || size == page_size);
    // LMDB maps the larger of the map size and the end of the last page named
    // (in 64-bit arithmetic that wraps, as here): less than the two meta
    // pages, and it read the second one outside its mapping.
    uint64_t mapped = std::max(Load64(meta[i] + kMapSizeAt), (Load64(meta[i] + kLastPageAt) + 1) * uint64_t{size});
    bool map_ok = mapped >= 2 * uint64_t{size};
    if (!(Load16(meta[i] + kFlagsAt) & kMetaPage) || Load32(meta[i] + kMagicAt) != kMagic ||
        (Load32(meta[i] + kVersionAt) & 0xFFFF) != kDataVersion || !size_ok || !map_ok || Load16(meta[i] + kMainFlagsAt) != 0) {
      problem = "LMDB meta page " + std::to_string(i) + " is damaged";
    }
    page_size = size;
  }
  // Sized only once the page size is known to be sound.
  std::vector<uint8_t> page(problem.empty() ? page_size : 0);
  for (int i = 0; i < 2 && problem.empty(); ++i) {
    uint64_t root = Load64(meta[i] + kMainRootAt);
    if (root == kNoPage) continue;  // an empty tree: the first meta page of a new file
    if (root < 2 || root >= file_size / page_size || !ReadAt(fd, page.data(), page_size, root * page_size) ||
        !RootPageSound(fd, &page, page_size, file_size / page_size)) {
      problem = "LMDB root page " + std::to_string(root) + " is damaged";
    }
  }
  ::close(fd);
  return problem;
}

// LMDB's error as text, without mdb_strerror: the liblmdb of the lmdb package
// returns a malloc'd copy from it, never freed, whenever one of its internal
// notes is pending, and corrupt pages leave such notes (fuzz_snapshot found
// 300 bytes leaked per refused file).
std::string LmdbError(int rc) {
  switch (rc) {
    case MDB_NOTFOUND: return "MDB_NOTFOUND: no such key";
    case MDB_PAGE_NOTFOUND: return "MDB_PAGE_NOTFOUND: a page number past the end";
    case MDB_CORRUPTED: return "MDB_CORRUPTED: a page of the wrong type";
    case MDB_INVALID: return "MDB_INVALID: not an LMDB file";
    case MDB_VERSION_MISMATCH: return "MDB_VERSION_MISMATCH: another LMDB version";
    case MDB_BAD_TXN: return "MDB_BAD_TXN: the read was refused";
  }
  return rc > 0 ? std::strerror(rc) : "LMDB error " + std::to_string(rc);
}

// Reads a key of an evidence entry (little-endian, as the writer put it).
template <typename K>
K LoadKey(const uint8_t* p) {
  K v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename K>
constexpr size_t EvidenceEntrySize() {
  return sizeof(K) == 4 ? kEvidenceV4Size : kEvidenceV6Size;
}

// The bits of a K below its first `len` (all of them for len 0).
template <typename K>
K HostMask(unsigned len) {
  constexpr unsigned kBits = KeyBits<K>();
  return len >= kBits ? K{0} : ~K{0} >> len;
}

// Checks an "ev.prefix" blob (snapshot_format.h): its size against its
// count, the directory, and every entry (no host bits, a flag table, a known
// source, in order). Sets `count`; empty when sound, else the problem.
template <typename K>
std::string CheckPrefixEvidence(const Blob& b, uint32_t sources, uint32_t* count) {
  constexpr unsigned kBits = KeyBits<K>();
  constexpr size_t kEntry = EvidenceEntrySize<K>();
  const uint64_t head = kEvidenceHeaderSize + 4 * uint64_t{kBits + 2};
  if (b.size < head || std::memcmp(b.data, "EVP1", 4) != 0) return "header is damaged";
  *count = Load32(b.data + 4);
  if (b.size != head + kEntry * uint64_t{*count}) return "size does not match its count";
  const uint8_t* dir = b.data + kEvidenceHeaderSize;
  if (Load32(dir) != 0 || Load32(dir + 4 * (kBits + 1)) != *count) return "directory does not cover its entries";
  const uint8_t* entries = b.data + head;
  for (unsigned len = 0; len <= kBits; ++len) {
    uint32_t from = Load32(dir + 4 * len), to = Load32(dir + 4 * (len + 1));
    if (from > to || to > *count) return "directory is out of order";
    for (uint32_t i = from; i < to; ++i) {
      const uint8_t* e = entries + kEntry * i;
      K start = LoadKey<K>(e);
      uint16_t source = Load16(e + sizeof(K));
      uint8_t table = e[sizeof(K) + 2], zero = e[sizeof(K) + 3];
      if ((start & HostMask<K>(len)) != 0 || table >= kFlagTableCount || zero != 0 || source >= sources) {
        return "entry " + std::to_string(i) + " is damaged";
      }
      if (i > from) {
        const uint8_t* p = e - kEntry;
        K before = LoadKey<K>(p);
        uint8_t before_table = p[sizeof(K) + 2];
        if (std::make_tuple(before, before_table, Load16(p + sizeof(K))) >= std::make_tuple(start, table, source)) {
          return "entry " + std::to_string(i) + " is out of order";
        }
      }
    }
  }
  return "";
}

// Checks the "ev.asn" blob the same way. Sets `count`.
std::string CheckAsnEvidence(const Blob& b, uint32_t asns, uint32_t sources, uint32_t* count) {
  if (b.size < kEvidenceHeaderSize || std::memcmp(b.data, "EVA1", 4) != 0) return "header is damaged";
  *count = Load32(b.data + 4);
  if (b.size != kEvidenceHeaderSize + kEvidenceAsnSize * uint64_t{*count}) return "size does not match its count";
  for (uint32_t i = 0; i < *count; ++i) {
    const uint8_t* e = b.data + kEvidenceHeaderSize + kEvidenceAsnSize * i;
    uint32_t record = Load32(e);
    uint16_t source = Load16(e + 4);
    if (record >= asns || e[6] >= kFlagTableCount || e[7] != 0 || source >= sources) return "entry " + std::to_string(i) + " is damaged";
    if (i > 0) {
      const uint8_t* p = e - kEvidenceAsnSize;
      if (std::make_tuple(Load32(p), p[6], Load16(p + 4)) >= std::make_tuple(record, e[6], source)) {
        return "entry " + std::to_string(i) + " is out of order";
      }
    }
  }
  return "";
}

// Appends the entries of an "ev.prefix" blob that hold `key`, in tables
// whose bit `flags` has. `count` is the count Open checked; directory
// words are clamped to it, so a blob changed since reads wrong, never
// outside itself.
template <typename K>
void ExplainPrefixes(const Blob& b, uint32_t count, K key, uint8_t flags, std::vector<Evidence>* out) {
  constexpr unsigned kBits = KeyBits<K>();
  constexpr size_t kEntry = EvidenceEntrySize<K>();
  const uint8_t* dir = b.data + kEvidenceHeaderSize;
  const uint8_t* entries = dir + 4 * (kBits + 2);
  for (unsigned len = 0; len <= kBits; ++len) {
    uint32_t lo = std::min(Load32(dir + 4 * len), count);
    uint32_t hi = std::min(std::max(Load32(dir + 4 * (len + 1)), lo), count);
    K prefix = key & ~HostMask<K>(len);
    while (lo < hi) {  // the first entry of the group not below `prefix`
      uint32_t mid = lo + (hi - lo) / 2;
      if (LoadKey<K>(entries + kEntry * mid) < prefix) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    uint32_t end = std::min(std::max(Load32(dir + 4 * (len + 1)), lo), count);
    for (uint32_t i = lo; i < end && LoadKey<K>(entries + kEntry * i) == prefix; ++i) {
      const uint8_t* e = entries + kEntry * i;
      uint8_t table = e[sizeof(K) + 2];
      if (table < kFlagTableCount && (flags >> table & 1)) {
        out->push_back(Evidence{table, static_cast<uint8_t>(len), false, Load16(e + sizeof(K))});
      }
    }
  }
}

FileStamp StampOf(const struct stat& st) {
  return FileStamp{static_cast<uint64_t>(st.st_size), int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
                   int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec};
}

}  // namespace

FileStamp Snapshot::Stamp() const {
  int fd = -1;
  struct stat st;
  if (mdb_env_get_fd(env_, &fd) != 0 || ::fstat(fd, &st) != 0) return FileStamp{};
  return StampOf(st);
}

bool Snapshot::Verify(const FileStamp& now, SnapshotError* error) const {
  if (now.size < file_size_) {
    error->code = ErrorCode::kSnapshotDamaged;
    error->message = "snapshot " + path_ + " was truncated to " + std::to_string(now.size) + " bytes while being served (it had " +
                     std::to_string(file_size_) + "): lookups that reach past its end fault the process; publish a new snapshot";
    return false;
  }
  uint64_t checksum = 0;
  for (const Blob& blob : blobs_) checksum = Checksum64(blob.data, blob.size, checksum);
  if (checksum != header_.checksum) {
    error->code = ErrorCode::kSnapshotDamaged;
    error->message = "snapshot " + path_ +
                     " was written to while being served and no longer matches its checksum: some answers may be wrong "
                     "until a new snapshot is published (ipr build)";
    return false;
  }
  return true;
}

std::shared_ptr<const Snapshot> Snapshot::Open(const std::string& path, SnapshotError* error) {
  std::shared_ptr<Snapshot> snapshot(new Snapshot());
  if (!snapshot->Load(path, error)) return nullptr;
  return snapshot;
}

void Snapshot::LookupBatch(const ParsedAddress* addrs, size_t n, Answer* out) const {
  // Chunks on the stack (no allocation); within a chunk each family's
  // addresses go through their trie's interleaved walk.
  constexpr size_t kChunk = 256;
  uint32_t v4[kChunk];
  u128 v6[kChunk];
  uint64_t v4_leaves[kChunk], v6_leaves[kChunk];
  uint16_t v4_at[kChunk], v6_at[kChunk];
  for (size_t base = 0; base < n; base += kChunk) {
    size_t count = n - base < kChunk ? n - base : kChunk;
    size_t n4 = 0, n6 = 0;
    for (size_t i = 0; i < count; ++i) {
      const ParsedAddress& a = addrs[base + i];
      if (a.family == Family::kV4) {
        v4_at[n4] = static_cast<uint16_t>(i);
        v4[n4++] = a.v4;
      } else {
        v6_at[n6] = static_cast<uint16_t>(i);
        v6[n6++] = a.v6;
      }
    }
    trie4_.LookupManyV4(v4, n4, v4_leaves);
    trie6_.LookupManyV6(v6, n6, v6_leaves);
    for (size_t k = 0; k < n4; ++k) out[base + v4_at[k]] = Unpack(v4_leaves[k]);
    for (size_t k = 0; k < n6; ++k) out[base + v6_at[k]] = Unpack(v6_leaves[k]);
  }
}

void Snapshot::Explain(const ParsedAddress& addr, const Answer& answer, std::vector<Evidence>* out) const {
  out->clear();
  if (addr.family == Family::kV4) {
    ExplainPrefixes<uint32_t>(evidence_[0], evidence_counts_[0], addr.v4, answer.flags, out);
  } else {
    ExplainPrefixes<u128>(evidence_[1], evidence_counts_[1], addr.v6, answer.flags, out);
  }
  if (answer.asn != kNoRecord) {
    const uint8_t* entries = evidence_[2].data + kEvidenceHeaderSize;
    uint32_t lo = 0, hi = evidence_counts_[2];
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (Load32(entries + kEvidenceAsnSize * mid) < answer.asn) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    for (uint32_t i = lo; i < evidence_counts_[2] && Load32(entries + kEvidenceAsnSize * i) == answer.asn; ++i) {
      const uint8_t* e = entries + kEvidenceAsnSize * i;
      if (e[6] < kFlagTableCount && (answer.flags >> e[6] & 1)) out->push_back(Evidence{e[6], answer.asn_len, true, Load16(e + 4)});
    }
  }
  std::sort(out->begin(), out->end(), [](const Evidence& a, const Evidence& b) {
    return std::make_tuple(a.table, -int{a.len}, a.by_asn, a.source) < std::make_tuple(b.table, -int{b.len}, b.by_asn, b.source);
  });
}

bool Snapshot::ValidLeaf(uint64_t v, unsigned key_bits) const {
  const uint32_t* counts = header_.record_counts;
  uint32_t asn = leaf::Asn(v), location = leaf::Location(v), provider = leaf::Provider(v);
  return leaf::ReservedClear(v) && leaf::AsnLen(v) <= key_bits && (asn == kNoRecord || asn < counts[kAsnRecords]) &&
         (location == kNoRecord || location < counts[kLocationRecords]) &&
         (provider == 0 || provider - 1 < counts[kCompanyRecords]);
}

Snapshot::~Snapshot() {
  if (txn_ != nullptr) mdb_txn_abort(txn_);
  if (env_ != nullptr) mdb_env_close(env_);
}

bool Snapshot::Load(const std::string& path, SnapshotError* error) {
  path_ = path;
  auto fail = [&](ErrorCode code, const std::string& message) {
    error->code = code;
    error->message = "snapshot " + path + ": " + message;
    return false;
  };

  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return fail(ErrorCode::kSnapshotMissing, "file not found");
  if (!S_ISREG(st.st_mode)) return fail(ErrorCode::kSnapshotInvalid, "not a regular file");
  file_size_ = static_cast<uint64_t>(st.st_size);
  opened_stamp_ = StampOf(st);
  std::string lmdb_problem = CheckLmdbPages(path, file_size_);
  if (!lmdb_problem.empty()) return fail(ErrorCode::kSnapshotInvalid, "not a readable LMDB file (" + lmdb_problem + ")");

  int rc = mdb_env_create(&env_);
  if (rc == 0) rc = mdb_env_open(env_, path.c_str(), MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0444);
  if (rc != 0) return fail(ErrorCode::kSnapshotInvalid, "not a readable LMDB file (" + LmdbError(rc) + ")");

  // A truncated file maps fine, but touching a page past its end raises
  // SIGBUS: check that every page LMDB may read lies inside the file.
  MDB_envinfo info;
  MDB_stat stat;
  mdb_env_info(env_, &info);
  mdb_env_stat(env_, &stat);
  uint64_t used = (static_cast<uint64_t>(info.me_last_pgno) + 1) * stat.ms_psize;
  if (used > file_size_) {
    return fail(ErrorCode::kSnapshotInvalid, "truncated: its pages reach byte " + std::to_string(used) + " but the file has " +
                                        std::to_string(file_size_));
  }
  const uint8_t* map_begin = static_cast<const uint8_t*>(info.me_mapaddr);
  // Values must lie in the file and in the mapping: LMDB maps the size its
  // meta page names (at least up to its last page), which a damaged meta page
  // makes shorter than the file.
  const uint8_t* map_end = map_begin + std::min<uint64_t>(file_size_, info.me_mapsize);
  // Ask for huge pages before the checksum pass reads the file in: random
  // lookups over a few hundred MiB otherwise spend much of their time on TLB
  // misses. Best effort: kernels without file THP ignore it.
  ::madvise(const_cast<uint8_t*>(map_begin), info.me_mapsize, MADV_HUGEPAGE);

  rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn_);
  MDB_dbi dbi = 0;
  if (rc == 0) rc = mdb_dbi_open(txn_, nullptr, 0, &dbi);
  if (rc != 0) return fail(ErrorCode::kSnapshotInvalid, "cannot read it (" + LmdbError(rc) + ")");

  auto get = [&](const char* name, Blob* blob) {
    MDB_val key{std::strlen(name), const_cast<char*>(name)};
    MDB_val val;
    int r = mdb_get(txn_, dbi, &key, &val);
    if (r != 0) return fail(ErrorCode::kSnapshotInvalid, std::string("no \"") + name + "\" entry (" + LmdbError(r) + ")");
    const uint8_t* data = static_cast<const uint8_t*>(val.mv_data);
    if (data < map_begin || data > map_end || val.mv_size > static_cast<size_t>(map_end - data)) {
      return fail(ErrorCode::kSnapshotInvalid, std::string("entry \"") + name + "\" lies outside the file");
    }
    *blob = Blob{data, val.mv_size};
    return true;
  };

  Blob header_blob;
  if (!get("header", &header_blob)) return false;
  // Magic and version first: the header's size changes with the format.
  constexpr size_t kVersionEnd = offsetof(SnapshotHeader, format_version) + 4;
  if (header_blob.size < kVersionEnd || std::memcmp(header_blob.data, "IPRSNAP", 8) != 0) {
    return fail(ErrorCode::kSnapshotInvalid, "not an ip-reputation snapshot");
  }
  uint32_t version = Load32(header_blob.data + offsetof(SnapshotHeader, format_version));
  if (version != kFormatVersion) {
    return fail(ErrorCode::kSnapshotVersion, "format version " + std::to_string(version) + ", this build reads version " +
                                        std::to_string(kFormatVersion) + "; rebuild it with `ipr build`");
  }
  if (header_blob.size != sizeof(SnapshotHeader)) return fail(ErrorCode::kSnapshotInvalid, "header has the wrong size");
  std::memcpy(&header_, header_blob.data, sizeof header_);

  Blob blobs[kBlobCount];
  uint64_t checksum = 0;
  for (unsigned i = 0; i < kBlobCount; ++i) {
    if (!get(kBlobNames[i], &blobs[i])) return false;
    checksum = Checksum64(blobs[i].data, blobs[i].size, checksum);
  }
  if (checksum != header_.checksum) return fail(ErrorCode::kSnapshotInvalid, "checksum mismatch: the file is corrupt");
  std::copy(blobs, blobs + kBlobCount, blobs_);
  meta_ = blobs[0];
  asn_company_ = blobs[3];

  // Everything below guards against a file that is consistent with its
  // checksum but wrong anyway (a writer bug, or a crafted file).
  const uint32_t* counts = header_.record_counts;
  std::string reason;
  if (!trie4_.Validate(blobs[1].data, blobs[1].size, 32, &reason)) return fail(ErrorCode::kSnapshotInvalid, "IPv4 " + reason);
  if (!trie6_.Validate(blobs[2].data, blobs[2].size, 128, &reason)) return fail(ErrorCode::kSnapshotInvalid, "IPv6 " + reason);
  for (const TrieView* trie : {&trie4_, &trie6_}) {
    unsigned key_bits = trie == &trie4_ ? 32 : 128;
    for (uint32_t i = 0; i < trie->leaf_count(); ++i) {
      if (!ValidLeaf(trie->leaf(i), key_bits)) {
        return fail(ErrorCode::kSnapshotInvalid, "IPv" + std::to_string(key_bits == 32 ? 4 : 6) + " trie leaf " +
                                            std::to_string(i) + " points past a record table");
      }
    }
  }
  if (asn_company_.size != 4 * uint64_t{counts[kAsnRecords]}) {
    return fail(ErrorCode::kSnapshotInvalid, "asn.company does not match the ASN records");
  }
  for (uint32_t i = 0; i < counts[kAsnRecords]; ++i) {
    uint32_t company = AsnCompany(i);
    if (company != kNoRecord && company >= counts[kCompanyRecords]) {
      return fail(ErrorCode::kSnapshotInvalid, "asn.company entry " + std::to_string(i) + " points past the companies");
    }
  }

  for (unsigned k = 0; k < kRecordKindCount; ++k) {
    const Blob& b = blobs[kFirstRecordBlob + k];
    const char* name = kBlobNames[kFirstRecordBlob + k];
    uint32_t count = counts[k];
    uint64_t table_size = kRecordTableHeaderSize + 4 * (uint64_t{count} + 1);
    if (b.size < table_size || std::memcmp(b.data, "REC1", 4) != 0 || Load32(b.data + 4) != count) {
      return fail(ErrorCode::kSnapshotInvalid, std::string(name) + " header does not match its count");
    }
    const uint8_t* offsets = b.data + kRecordTableHeaderSize;
    uint64_t bytes = b.size - table_size;
    uint32_t previous = 0;
    for (uint32_t i = 0; i <= count; ++i) {
      uint32_t offset = Load32(offsets + 4 * size_t{i});
      if (offset < previous || offset > bytes || (i == 0 && offset != 0)) {
        return fail(ErrorCode::kSnapshotInvalid, std::string(name) + " offset " + std::to_string(i) + " out of range");
      }
      previous = offset;
    }
    for (const uint8_t* p = b.data + table_size; p < b.data + b.size; ++p) {
      if (*p < 0x20 || *p > 0x7E) return fail(ErrorCode::kSnapshotInvalid, std::string(name) + " holds a non-ASCII byte");
    }
    records_[k] = b;
    record_bytes_[k] = bytes;
  }

  const uint32_t sources = counts[kSourceRecords];
  const Blob* evidence = blobs + kFirstEvidenceBlob;
  const std::string problems[3] = {
      CheckPrefixEvidence<uint32_t>(evidence[0], sources, &evidence_counts_[0]),
      CheckPrefixEvidence<u128>(evidence[1], sources, &evidence_counts_[1]),
      CheckAsnEvidence(evidence[2], counts[kAsnRecords], sources, &evidence_counts_[2]),
  };
  for (unsigned i = 0; i < 3; ++i) {
    if (!problems[i].empty()) return fail(ErrorCode::kSnapshotInvalid, std::string(kBlobNames[kFirstEvidenceBlob + i]) + " " + problems[i]);
    evidence_[i] = evidence[i];
  }
  return true;
}

}  // namespace ipr
