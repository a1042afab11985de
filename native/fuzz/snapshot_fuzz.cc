// libFuzzer target: Snapshot::Open on corrupted copies of a real snapshot,
// then lookups on whatever opens.
//
// A snapshot is megabytes (the IPv4 and IPv6 direct arrays alone are 5 MiB),
// far too big for libFuzzer to mutate usefully, so the input is not a file but
// a short program of corruptions applied to a real snapshot read once at
// start from $IPR_FUZZ_SNAPSHOT (`npm run fuzz` builds one from the real
// feeds). Each operation names a region of that file (the LMDB meta pages,
// its tree pages, a whole value, a trie's header, direct array, nodes or
// leaves, a record table's offsets or bytes, the evidence's directories and
// entries) so that mutations land where the parsing is, not only in the bulk
// of the tries:
//
//   xor a byte, set a byte, set or nudge a 32-bit word, truncate the file,
//   copy or swap whole pages (reordered and duplicated pages), append copies
//   of a page; after any of them, optionally "fix the checksum": recompute
//   the header's checksum over the values as they now are, which gets past
//   the checksum to the checks behind it (what a crafted file, or a writer
//   bug, would meet).
//
// Opcode 0 ends the program; the bytes after it are addresses to look up,
// besides a fixed seeded set. The corrupted file is written to a scratch file
// ($IPR_FUZZ_WORKDIR, else /dev/shm or /tmp) and opened by path, exactly as in
// production. What must hold:
//   - Open either refuses with a snapshot_* code and a message naming the
//     file, or returns a snapshot whose blobs lie inside the file's mapping
//     (read from /proc/self/maps, not from the code under test);
//   - every answer's record ids are kNoRecord or within the record counts,
//     their record texts within the record tables, the route length within
//     the family's width; LookupBatch answers what Lookup answers;
//   - its evidence (Explain) names sources of the source table, only for
//     flags the answer carries, with prefixes no longer than the address;
//   - no crash, no sanitizer report (ASan, UBSan, LeakSanitizer), no hang.
//
// The regions are listed at start; inputs name them by index, so the
// committed seeds (native/fuzz/corpus/snapshot/) assume the layout of the seed
// snapshot run.js builds. At exit the target prints how its inputs ended
// (opened, or each reason of refusal, numbers elided): the figures of
// docs/RELIABILITY.md.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "checksum.h"
#include "lmdb.h"
#include "snapshot.h"

using namespace ipr;

namespace {

struct Span {
  uint64_t begin;
  uint64_t size;
};

struct Region {
  const char* name;
  Span span;
};

// The pristine snapshot and where its parts are.
struct Base {
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> work;  // bytes with the current input's corruptions
  uint64_t page_size = 0;
  Span header{};
  Span blobs[kBlobCount]{};
  std::vector<Region> regions;  // where corruptions land; an input names one by its index
  std::vector<ParsedAddress> addresses;
  std::string work_path;
  int work_fd = -1;
};

Base* base = nullptr;

// How each input ended: "opened", or the refusal's reason with the file name
// and numbers taken out. Printed at exit, for docs/RELIABILITY.md.
std::map<std::string, uint64_t>* outcomes = nullptr;

void CountOutcome(const std::string& reason) {
  std::string key;
  for (size_t i = 0; i < reason.size(); ++i) {
    if (reason[i] >= '0' && reason[i] <= '9') {
      if (key.empty() || key.back() != 'N') key += 'N';
    } else {
      key += reason[i];
    }
  }
  ++(*outcomes)[key];
}

void PrintOutcomes() {
  std::vector<std::pair<uint64_t, std::string>> sorted;
  for (const auto& [reason, count] : *outcomes) sorted.emplace_back(count, reason);
  std::sort(sorted.rbegin(), sorted.rend());
  for (const auto& [count, reason] : sorted) {
    std::fprintf(stderr, "snapshot fuzzer outcome: %llu %s\n", static_cast<unsigned long long>(count), reason.c_str());
  }
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "snapshot fuzzer: %s\n", message.c_str());
  std::abort();
}

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// splitmix64: the fixed address set is the same on every run.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

ParsedAddress V4(uint32_t v, bool mapped = false) {
  return ParsedAddress{Family::kV4, mapped, v, mapped ? (u128{0xFFFF} << 32 | v) : 0};
}
ParsedAddress V6(u128 v) { return ParsedAddress{Family::kV6, false, 0, v}; }

// Where each value of the pristine file lies, from LMDB itself.
void LocateValues(const std::string& path) {
  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  int rc = mdb_env_create(&env);
  if (rc == 0) rc = mdb_env_open(env, path.c_str(), MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK, 0444);
  if (rc == 0) rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
  if (rc == 0) rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
  if (rc != 0) Die(std::string("cannot read the seed snapshot with LMDB: ") + mdb_strerror(rc));
  MDB_envinfo info;
  MDB_stat stat;
  mdb_env_info(env, &info);
  mdb_env_stat(env, &stat);
  base->page_size = stat.ms_psize;
  const uint8_t* map = static_cast<const uint8_t*>(info.me_mapaddr);
  auto locate = [&](const char* name) {
    MDB_val key{std::strlen(name), const_cast<char*>(name)};
    MDB_val val;
    if (mdb_get(txn, dbi, &key, &val) != 0) Die(std::string("seed snapshot has no ") + name);
    return Span{static_cast<uint64_t>(static_cast<const uint8_t*>(val.mv_data) - map), val.mv_size};
  };
  base->header = locate("header");
  for (unsigned i = 0; i < kBlobCount; ++i) base->blobs[i] = locate(kBlobNames[i]);
  mdb_txn_abort(txn);
  mdb_env_close(env);
}

void AddRegions() {
  std::vector<Region>& r = base->regions;
  const uint64_t size = base->bytes.size(), ps = base->page_size;
  r.push_back({"file", {0, size}});
  r.push_back({"meta pages", {0, 2 * ps}});
  r.push_back({"last pages", {size - 16 * ps, 16 * ps}});  // where a read past the end is near
  // LMDB's tree pages: every page past the metas that no large value fills.
  // (A large value starts kBlobMapOffset into its first overflow page; a
  // small one sits inside a tree page.)
  auto in_overflow = [&](const Span& s) { return s.begin % ps == kBlobMapOffset; };
  std::vector<bool> overflow(size / ps, false);
  for (const Span& s : base->blobs) {
    if (!in_overflow(s)) continue;
    for (uint64_t p = s.begin / ps; p < overflow.size() && p * ps < s.begin + s.size; ++p) overflow[p] = true;
  }
  for (uint64_t p = 2; p < overflow.size(); ++p) {
    if (!overflow[p]) r.push_back({"tree page", {p * ps, ps}});
  }
  r.push_back({"header", base->header});
  for (unsigned i = 0; i < kBlobCount; ++i) r.push_back({kBlobNames[i], base->blobs[i]});
  // The overflow page headers in front of the large values.
  for (const Span& s : base->blobs) {
    if (in_overflow(s)) r.push_back({"page header", {s.begin - kBlobMapOffset, kBlobMapOffset + 16}});
  }
  const uint8_t* bytes = base->bytes.data();
  for (unsigned t = 1; t <= 2; ++t) {
    const Span& s = base->blobs[t];
    TrieHeader h;
    std::memcpy(&h, bytes + s.begin, sizeof h);
    uint64_t nodes = uint64_t{h.node_count} * sizeof(TrieNode);
    r.push_back({"trie header", {s.begin, sizeof h}});
    r.push_back({"trie direct", {s.begin + sizeof h, h.nodes_offset - sizeof h}});
    r.push_back({"trie nodes", {s.begin + h.nodes_offset, nodes}});
    r.push_back({"trie leaves", {s.begin + h.nodes_offset + nodes, 8 * uint64_t{h.leaf_count}}});
  }
  for (unsigned k = 0; k < kRecordKindCount; ++k) {
    const Span& s = base->blobs[kFirstRecordBlob + k];
    uint64_t head = kRecordTableHeaderSize + 4 * (uint64_t{Load32(bytes + s.begin + 4)} + 1);
    r.push_back({"record offsets", {s.begin, head}});
    if (s.size > head) r.push_back({"record texts", {s.begin + head, s.size - head}});
  }
  // The evidence: each prefix blob's header and directory, then its entries; the ASN one's header, then entries.
  for (unsigned f = 0; f < 2; ++f) {
    const Span& s = base->blobs[kFirstEvidenceBlob + f];
    uint64_t head = kEvidenceHeaderSize + 4 * uint64_t{(f == 0 ? 32u : 128u) + 2};
    r.push_back({"evidence directory", {s.begin, head}});
    if (s.size > head) r.push_back({"evidence entries", {s.begin + head, s.size - head}});
  }
  const Span& asn = base->blobs[kFirstEvidenceBlob + 2];
  r.push_back({"evidence header", {asn.begin, kEvidenceHeaderSize}});
  if (asn.size > kEvidenceHeaderSize) r.push_back({"evidence entries", {asn.begin + kEvidenceHeaderSize, asn.size - kEvidenceHeaderSize}});
}

// Addresses where the data is (blocks the tries subdivide), random ones,
// IPv4-mapped ones and the ends of both spaces.
void ChooseAddresses(const Snapshot& snapshot) {
  uint64_t state = 20260823;
  std::vector<ParsedAddress>& out = base->addresses;
  std::vector<uint32_t> blocks4 = snapshot.trie4().SubdividedBlocks();
  std::vector<uint32_t> blocks6 = snapshot.trie6().SubdividedBlocks();
  for (int i = 0; i < 384; ++i) {
    uint64_t r = NextRandom(&state);
    if (!blocks4.empty()) {
      uint32_t block = blocks4[r % blocks4.size()];
      out.push_back(V4(block << (32 - DirectBits(32)) | static_cast<uint32_t>(r >> 32) >> DirectBits(32)));
    }
    if (!blocks6.empty()) {
      u128 block = blocks6[(r >> 20) % blocks6.size()];
      u128 low = (u128{NextRandom(&state)} << 64 | NextRandom(&state)) >> DirectBits(128);
      out.push_back(V6(block << (128 - DirectBits(128)) | low));
    }
    out.push_back(V4(static_cast<uint32_t>(NextRandom(&state))));
    out.push_back(V4(static_cast<uint32_t>(NextRandom(&state)), true));
    out.push_back(V6(u128{NextRandom(&state)} << 64 | NextRandom(&state)));
  }
  for (uint32_t v : {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu}) out.push_back(V4(v));
  for (u128 v : {u128{0}, u128{1}, ~u128{0}, ~u128{0} >> 1, u128{0x20010db8} << 96}) out.push_back(V6(v));
}

void Setup() {
  const char* path = std::getenv("IPR_FUZZ_SNAPSHOT");
  if (path == nullptr) Die("set IPR_FUZZ_SNAPSHOT to a snapshot file (npm run fuzz builds one from the real feeds)");
  base = new Base();
  std::ifstream in(path, std::ios::binary);
  base->bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (base->bytes.empty()) Die(std::string("cannot read ") + path);
  base->work = base->bytes;
  SnapshotError error;
  std::shared_ptr<const Snapshot> pristine = Snapshot::Open(path, &error);
  if (!pristine) Die("the seed snapshot does not open: " + error.message);
  LocateValues(path);
  AddRegions();
  ChooseAddresses(*pristine);

  const char* dir = std::getenv("IPR_FUZZ_WORKDIR");
  struct stat st;
  std::string work_dir = dir != nullptr ? dir : ::stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
  base->work_path = work_dir + "/ipr-fuzz-snapshot-" + std::to_string(::getpid()) + ".mdb";
  base->work_fd = ::open(base->work_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (base->work_fd < 0 || ::pwrite(base->work_fd, base->bytes.data(), base->bytes.size(), 0) !=
                               static_cast<ssize_t>(base->bytes.size())) {
    Die("cannot write " + base->work_path);
  }
  outcomes = new std::map<std::string, uint64_t>();
  std::atexit([] {
    ::unlink(base->work_path.c_str());
    PrintOutcomes();
  });
  std::fprintf(stderr, "snapshot fuzzer: %s, %zu bytes, %zu addresses, scratch file %s\nregions:", path,
               base->bytes.size(), base->addresses.size(), base->work_path.c_str());
  for (size_t i = 0; i < base->regions.size(); ++i) {
    const Region& region = base->regions[i];
    std::fprintf(stderr, " %zu %s (%llu+%llu)%s", i, region.name, static_cast<unsigned long long>(region.span.begin),
                 static_cast<unsigned long long>(region.span.size), i + 1 < base->regions.size() ? "," : "\n");
  }
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  uint64_t Take(unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes && p_ < end_; ++i) v |= uint64_t{*p_++} << (8 * i);
    return v;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// The corrupted file: the pristine bytes plus what the program changed. The
// scratch file is brought to it, and put back after each input, by
// rewriting only what changed: the spans written, and everything from the
// shortest length the file had on.
class Corruption {
 public:
  Corruption() : bytes_(base->work), size_(base->bytes.size()), min_size_(size_) {}

  void Apply(Reader* in) {
    for (int ops = 0; ops < 32 && !in->empty(); ++ops) {
      unsigned op = static_cast<unsigned>(in->Take(1) % 9);
      if (op == 0) return;  // the rest are addresses
      const Span& region = base->regions[in->Take(1) % base->regions.size()].span;
      uint64_t at = region.begin + (region.size == 0 ? 0 : in->Take(4) % region.size);
      switch (op) {
        case 1:
          Write(at, {static_cast<uint8_t>(Byte(at) ^ in->Take(1))});
          break;
        case 2:
          Write(at, {static_cast<uint8_t>(in->Take(1))});
          break;
        case 3:
          WriteWord(at, static_cast<uint32_t>(in->Take(4)));
          break;
        case 4:  // off by a little: counts, offsets, sizes, page numbers
          WriteWord(at, Word(at) + static_cast<uint32_t>(static_cast<int8_t>(in->Take(1))));
          break;
        case 5:
          if (at < size_) size_ = at;
          min_size_ = std::min(min_size_, size_);
          break;
        case 6:
          CopyPage(in->Take(2), at / base->page_size);
          break;
        case 7: {
          uint64_t other = in->Take(2) % std::max<uint64_t>(PageCount(), 1), page = at / base->page_size;
          std::vector<uint8_t> saved = PageBytes(page);
          CopyPage(other, page);
          WritePage(other, saved);
          break;
        }
        case 8:
          Append(at / base->page_size, 1 + in->Take(1) % 4);
          break;
      }
      if (in->Take(1) % 4 == 0) FixChecksum();
    }
  }

  // Brings the scratch file to the corrupted bytes.
  void Store() {
    int fd = base->work_fd;
    if (min_size_ != base->bytes.size()) Truncate(fd, min_size_);
    for (const Span& s : dirty_) {
      if (s.begin < min_size_) Pwrite(fd, bytes_.data() + s.begin, std::min(s.size, min_size_ - s.begin), s.begin);
    }
    if (size_ > min_size_) Pwrite(fd, bytes_.data() + min_size_, size_ - min_size_, min_size_);
  }

  // Puts the pristine bytes back, in memory and in the scratch file.
  ~Corruption() {
    int fd = base->work_fd;
    const uint64_t pristine = base->bytes.size();
    if (size_ != pristine) Truncate(fd, pristine);
    if (min_size_ < pristine) dirty_.push_back({min_size_, pristine - min_size_});
    for (const Span& s : dirty_) {
      if (s.begin >= pristine) continue;
      uint64_t n = std::min(s.size, pristine - s.begin);
      std::memcpy(bytes_.data() + s.begin, base->bytes.data() + s.begin, n);
      Pwrite(fd, base->bytes.data() + s.begin, n, s.begin);
    }
    bytes_.resize(pristine);
  }

  uint64_t size() const { return size_; }

 private:
  static void Pwrite(int fd, const uint8_t* p, uint64_t n, uint64_t at) {
    if (::pwrite(fd, p, n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) Die("pwrite failed");
  }
  static void Truncate(int fd, uint64_t size) {
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) Die("ftruncate failed");
  }
  uint64_t PageCount() const { return (size_ + base->page_size - 1) / base->page_size; }
  uint8_t Byte(uint64_t at) const { return at < size_ ? bytes_[at] : 0; }
  uint32_t Word(uint64_t at) const {
    uint32_t v = 0;
    for (unsigned i = 0; i < 4; ++i) v |= uint32_t{Byte(at + i)} << (8 * i);
    return v;
  }
  void Write(uint64_t at, const std::vector<uint8_t>& data) {
    uint64_t n = at >= size_ ? 0 : std::min<uint64_t>(data.size(), size_ - at);
    if (n == 0) return;
    std::memcpy(bytes_.data() + at, data.data(), n);
    dirty_.push_back({at, n});
  }
  void WriteWord(uint64_t at, uint32_t v) {
    Write(at, {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
               static_cast<uint8_t>(v >> 24)});
  }
  std::vector<uint8_t> PageBytes(uint64_t page) const {
    uint64_t begin = page * base->page_size;
    if (begin >= size_) return {};
    return std::vector<uint8_t>(bytes_.begin() + static_cast<ptrdiff_t>(begin),
                                bytes_.begin() + static_cast<ptrdiff_t>(std::min(size_, begin + base->page_size)));
  }
  void WritePage(uint64_t page, const std::vector<uint8_t>& data) { Write(page * base->page_size, data); }
  void CopyPage(uint64_t from, uint64_t to) {
    uint64_t pages = PageCount();
    if (pages != 0) WritePage(to % pages, PageBytes(from % pages));
  }
  // Appends `count` copies of a page: a file longer than its LMDB pages say.
  void Append(uint64_t from, uint64_t count) {
    std::vector<uint8_t> page = PageBytes(from % std::max<uint64_t>(PageCount(), 1));
    page.resize(base->page_size, 0);
    for (uint64_t i = 0; i < count; ++i) {
      if (bytes_.size() < size_ + page.size()) bytes_.resize(size_ + page.size());
      std::memcpy(bytes_.data() + size_, page.data(), page.size());
      size_ += page.size();
    }
  }
  // Recomputes the header's checksum over the values where the pristine
  // file keeps them, as a crafted file would.
  void FixChecksum() {
    uint64_t checksum = 0;
    for (const Span& s : base->blobs) {
      if (s.begin + s.size > size_) return;
      checksum = Checksum64(bytes_.data() + s.begin, s.size, checksum);
    }
    std::vector<uint8_t> le(8);
    for (unsigned i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(checksum >> (8 * i));
    Write(base->header.begin + offsetof(SnapshotHeader, checksum), le);
  }

  std::vector<uint8_t>& bytes_;
  uint64_t size_;
  uint64_t min_size_;
  std::vector<Span> dirty_;
};

// The mapped range of the scratch file, from the kernel's own list.
Span FileMapping(uint64_t file_size) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uint64_t begin = 0, end = 0;
  while (std::getline(maps, line)) {
    if (line.size() < base->work_path.size() ||
        line.compare(line.size() - base->work_path.size(), base->work_path.size(), base->work_path) != 0) {
      continue;
    }
    uint64_t b = 0, e = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &b, &e) != 2) continue;
    if (begin == 0) begin = b;
    if (b == end || end == 0) end = e;  // a mapping split in several lines by madvise
  }
  if (begin == 0) Die("the snapshot is not mapped");
  return Span{begin, std::min(end - begin, file_size)};
}

void CheckInside(const Span& map, const uint8_t* data, uint64_t size, const char* what) {
  uint64_t p = reinterpret_cast<uintptr_t>(data);
  if (p < map.begin || p > map.begin + map.size || size > map.begin + map.size - p) {
    Die(std::string(what) + " lies outside the mapped file");
  }
}

// What the JavaScript side does with an id: read the record's text.
uint64_t ReadRecord(const Snapshot& s, RecordKind kind, uint32_t id) {
  if (id == kNoRecord) return 0;
  if (id >= s.header().record_counts[kind]) Die("a record id past its table");
  Blob b = s.records(kind);
  uint64_t texts = kRecordTableHeaderSize + 4 * (uint64_t{Load32(b.data + 4)} + 1);
  uint32_t from = Load32(b.data + kRecordTableHeaderSize + 4 * uint64_t{id});
  uint32_t to = Load32(b.data + kRecordTableHeaderSize + 4 * (uint64_t{id} + 1));
  if (from > to || texts + to > b.size) Die("a record text outside its table");
  uint64_t sum = 0;
  for (uint64_t i = texts + from; i < texts + to; ++i) sum += b.data[i];
  return sum;
}

void CheckAnswer(const Snapshot& s, const ParsedAddress& addr, const Answer& a) {
  ReadRecord(s, kCompanyRecords, a.company);
  ReadRecord(s, kAsnRecords, a.asn);
  ReadRecord(s, kLocationRecords, a.location);
  if (a.flags >= 1u << kFlagTableCount) Die("flags beyond the flag tables");
  const unsigned width = addr.family == Family::kV4 ? 32 : 128;
  if (a.asn_len > width) Die("a route longer than the address");
  char route[kMaxCidrText];
  if (ipr::FormatRoute(addr, a.asn_len, route) > kMaxCidrText) Die("a route text too long");
  // What `explain` reads: every entry in a table the answer flags, naming a
  // source of the source table, with a prefix no longer than the address.
  std::vector<Evidence> evidence;
  s.Explain(addr, a, &evidence);
  for (const Evidence& e : evidence) {
    if (e.table >= kFlagTableCount || !(a.flags >> e.table & 1)) Die("evidence for a flag the answer does not carry");
    ReadRecord(s, kSourceRecords, e.source);
    if (e.len > width) Die("an evidence prefix longer than the address");
    if (e.by_asn && (a.asn == kNoRecord || e.len != a.asn_len)) Die("ASN evidence without the answer's ASN route");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Setup();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  Corruption corruption;
  corruption.Apply(&in);
  corruption.Store();

  std::vector<ParsedAddress> addresses = base->addresses;
  while (!in.empty()) {
    if (in.Take(1) & 1) {
      addresses.push_back(V4(static_cast<uint32_t>(in.Take(4))));
    } else {
      u128 hi = in.Take(8);
      addresses.push_back(V6(hi << 64 | in.Take(8)));
    }
  }

  SnapshotError error;
  std::shared_ptr<const Snapshot> snapshot = Snapshot::Open(base->work_path, &error);
  if (!snapshot) {
    const std::string prefix = "snapshot " + base->work_path + ": ";
    if ((error.code != ErrorCode::kSnapshotInvalid && error.code != ErrorCode::kSnapshotVersion &&
         error.code != ErrorCode::kSnapshotMissing) ||
        error.message.compare(0, prefix.size(), prefix) != 0 || error.message.size() == prefix.size()) {
      Die(std::string("a refusal without a proper error: [") + ErrorCodeName(error.code) + "] " + error.message);
    }
    CountOutcome("refused: " + error.message.substr(prefix.size()));
    return 0;
  }

  CountOutcome("opened");
  const Snapshot& s = *snapshot;
  if (s.header().format_version != kFormatVersion) Die("opened another format version");
  Span map = FileMapping(corruption.size());
  CheckInside(map, s.meta().data, s.meta().size, "meta");
  for (unsigned k = 0; k < kRecordKindCount; ++k) {
    Blob b = s.records(static_cast<RecordKind>(k));
    CheckInside(map, b.data, b.size, kBlobNames[kFirstRecordBlob + k]);
  }
  CheckInside(map, s.trie4().nodes(), sizeof(TrieNode) * uint64_t{s.trie4().node_count()} + 8 * uint64_t{s.trie4().leaf_count()}, "trie4 nodes and leaves");
  CheckInside(map, s.trie6().nodes(), sizeof(TrieNode) * uint64_t{s.trie6().node_count()} + 8 * uint64_t{s.trie6().leaf_count()}, "trie6 nodes and leaves");

  std::vector<Answer> batch(addresses.size());
  s.LookupBatch(addresses.data(), addresses.size(), batch.data());
  for (size_t i = 0; i < addresses.size(); ++i) {
    Answer one = s.Lookup(addresses[i]);
    CheckAnswer(s, addresses[i], one);
    const Answer& b = batch[i];
    if (b.company != one.company || b.asn != one.asn || b.location != one.location || b.flags != one.flags ||
        b.asn_len != one.asn_len) {
      Die("LookupBatch and Lookup disagree");
    }
  }
  return 0;
}
