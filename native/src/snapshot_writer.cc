#include "snapshot_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "checksum.h"
#include "lmdb.h"
#include "trie.h"

namespace ipr {
namespace {

// A flag table lists an address without naming its company: distinct from
// kNoValue, which means "not listed" (and equals kNoRecord).
constexpr uint32_t kListedWithoutCompany = 0xFFFFFFFEu;

// Addresses that are not globally reachable (IANA special-purpose registries,
// plus multicast and reserved space): they answer "nothing known" whatever a
// feed says, as docs/API.md ("The check result") requires.
struct SpecialV4 {
  uint32_t start;
  uint8_t len;
};
constexpr SpecialV4 kSpecialV4[] = {
    {0x00000000, 8},   // 0.0.0.0/8 "this network"
    {0x0A000000, 8},   // 10.0.0.0/8 private
    {0x64400000, 10},  // 100.64.0.0/10 shared (CGN)
    {0x7F000000, 8},   // 127.0.0.0/8 loopback
    {0xA9FE0000, 16},  // 169.254.0.0/16 link-local
    {0xAC100000, 12},  // 172.16.0.0/12 private
    {0xC0000000, 24},  // 192.0.0.0/24 IETF protocol assignments
    {0xC0000200, 24},  // 192.0.2.0/24 documentation
    {0xC0586300, 24},  // 192.88.99.0/24 deprecated 6to4 relay
    {0xC0A80000, 16},  // 192.168.0.0/16 private
    {0xC6120000, 15},  // 198.18.0.0/15 benchmarking
    {0xC6336400, 24},  // 198.51.100.0/24 documentation
    {0xCB007100, 24},  // 203.0.113.0/24 documentation
    {0xE0000000, 4},   // 224.0.0.0/4 multicast
    {0xF0000000, 4},   // 240.0.0.0/4 reserved, broadcast
};
struct SpecialV6 {
  uint64_t high;  // first 64 bits
  uint64_t low;   // last 64 bits
  uint8_t len;
};
constexpr SpecialV6 kSpecialV6[] = {
    {0, 0, 96},                            // ::/96 unspecified, loopback, IPv4-compatible
    {0, 0x0000FFFF00000000, 96},           // ::ffff:0:0/96 IPv4-mapped (looked up as IPv4)
    {0x0064FF9B00010000, 0, 48},           // 64:ff9b:1::/48 local-use translation
    {0x0100000000000000, 0, 64},           // 100::/64 discard-only
    {0x2001000200000000, 0, 48},           // 2001:2::/48 benchmarking
    {0x2001001000000000, 0, 28},           // 2001:10::/28 deprecated ORCHID
    {0x20010DB800000000, 0, 32},           // 2001:db8::/32 documentation
    {0x3FFF000000000000, 0, 20},           // 3fff::/20 documentation
    {0x5F00000000000000, 0, 16},           // 5f00::/16 segment routing SIDs
    {0xFC00000000000000, 0, 7},            // fc00::/7 unique local
    {0xFE80000000000000, 0, 10},           // fe80::/10 link-local
    {0xFEC0000000000000, 0, 10},           // fec0::/10 deprecated site-local
    {0xFF00000000000000, 0, 8},            // ff00::/8 multicast
};

template <typename K>
K LoadAddress(const uint8_t* p) {
  K v = 0;
  for (size_t i = 0; i < sizeof(K); ++i) v = (v << 8) | p[i];
  return v;
}

template <typename K>
Partition<K> SpecialPartition();

template <>
Partition<uint32_t> SpecialPartition<uint32_t>() {
  std::vector<Prefix<uint32_t>> prefixes;
  for (const SpecialV4& s : kSpecialV4) prefixes.push_back({s.start, 1, 0, s.len, 0});
  return ResolvePrefixes(&prefixes);
}

template <>
Partition<u128> SpecialPartition<u128>() {
  std::vector<Prefix<u128>> prefixes;
  for (const SpecialV6& s : kSpecialV6) prefixes.push_back({(u128{s.high} << 64) | s.low, 1, 0, s.len, 0});
  return ResolvePrefixes(&prefixes);
}

std::vector<uint8_t> RecordTableBlob(const std::vector<uint8_t>& bytes, const std::vector<uint32_t>& offsets) {
  std::vector<uint8_t> blob(kRecordTableHeaderSize + 4 * offsets.size() + bytes.size());
  uint32_t count = static_cast<uint32_t>(offsets.size() - 1);
  std::memcpy(blob.data(), "REC1", 4);
  std::memcpy(blob.data() + 4, &count, 4);
  std::memcpy(blob.data() + kRecordTableHeaderSize, offsets.data(), 4 * offsets.size());
  if (!bytes.empty()) std::memcpy(blob.data() + kRecordTableHeaderSize + 4 * offsets.size(), bytes.data(), bytes.size());
  return blob;
}

template <typename T>
void Put(std::vector<uint8_t>* out, const T& v) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof v);
}

// An evidence blob's header: its magic and entry count.
std::vector<uint8_t> EvidenceHeader(const char* magic, size_t count) {
  std::vector<uint8_t> blob(kEvidenceHeaderSize);
  uint32_t n = static_cast<uint32_t>(count);
  std::memcpy(blob.data(), magic, 4);
  std::memcpy(blob.data() + 4, &n, 4);
  return blob;
}

// The "ev.prefix" blob of one family (snapshot_format.h) from the prefixes of
// its flag tables, each kept with the source that listed it.
template <typename K>
std::vector<uint8_t> PrefixEvidenceBlob(const std::vector<Prefix<K>>* flag_tables) {
  struct Entry {
    K start;
    uint16_t source;
    uint8_t len;
    uint8_t table;
  };
  std::vector<Entry> entries;
  for (unsigned t = 0; t < kFlagTableCount; ++t) {
    for (const Prefix<K>& p : flag_tables[t]) entries.push_back(Entry{p.start, p.source, p.len, static_cast<uint8_t>(t)});
  }
  auto key = [](const Entry& e) { return std::make_tuple(e.len, e.start, e.table, e.source); };
  std::sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) { return key(a) < key(b); });
  entries.erase(std::unique(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) { return key(a) == key(b); }),
                entries.end());
  constexpr unsigned kBits = KeyBits<K>();
  std::vector<uint8_t> blob = EvidenceHeader("EVP1", entries.size());
  size_t at = 0;
  for (unsigned len = 0; len <= kBits + 1; ++len) {
    while (at < entries.size() && entries[at].len < len) ++at;
    Put(&blob, static_cast<uint32_t>(at));
  }
  for (const Entry& e : entries) {
    Put(&blob, e.start);
    Put(&blob, e.source);
    Put(&blob, e.table);
    Put(&blob, uint8_t{0});
  }
  return blob;
}

// " (no space left on device: ...)" when the file system holding `path` has
// less than `needed` bytes free, else "". LMDB reports a write cut short by a
// full disk as EIO ("Input/output error"), which would send an operator
// looking for a broken disk.
std::string SpaceNote(const std::string& path, uint64_t needed) {
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  struct statvfs fs;
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) != 0) return "";
  uint64_t available = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (available >= needed) return "";
  char note[200];
  std::snprintf(note, sizeof note, " (no space left on device: the snapshot needs %.1f MiB and the file system has %.1f MiB free)",
                static_cast<double>(needed) / (1 << 20), static_cast<double>(available) / (1 << 20));
  return note;
}

}  // namespace

void SnapshotWriter::AddRanges(Table table, Family family, const uint8_t* starts, const uint8_t* ends,
                               const uint32_t* values, const uint16_t* sources, size_t count) {
  if (compiled_) throw std::logic_error("snapshot writer: already compiled");
  if (table >= kTableCount) throw std::invalid_argument("snapshot writer: unknown table");
  auto add = [&](auto* fam, auto zero, size_t width, int fi) {
    using K = decltype(zero);
    auto& prefixes = fam->prefixes[table];
    for (size_t i = 0; i < count; ++i) {
      K first = LoadAddress<K>(starts + width * i);
      K last = LoadAddress<K>(ends + width * i);
      if (last < first) throw std::invalid_argument("snapshot writer: a range ends before it starts");
      if (table == kAsn && fam->asn_resolved) throw std::logic_error("snapshot writer: the ASN table was already resolved");
      uint32_t value = values[i];
      if (table < kFlagTableCount && value == kNoValue) value = kListedWithoutCompany;
      AppendRangePrefixes(first, last, value, order_++, sources[i], &prefixes);
    }
    stats_.tables[table].ranges[fi] += count;
  };
  if (family == Family::kV4) {
    add(&v4_, uint32_t{0}, 4, 0);
  } else {
    add(&v6_, u128{0}, 16, 1);
  }
}

void SnapshotWriter::SetAsnAttributes(std::vector<uint8_t> flags, std::vector<uint32_t> companies) {
  if (flags.size() != companies.size()) throw std::invalid_argument("snapshot writer: ASN attribute sizes differ");
  asn_flags_ = std::move(flags);
  asn_companies_ = std::move(companies);
}

void SnapshotWriter::SetAsnEvidence(std::vector<uint32_t> records, std::vector<uint16_t> sources, std::vector<uint8_t> tables) {
  if (records.size() != sources.size() || records.size() != tables.size()) {
    throw std::invalid_argument("snapshot writer: ASN evidence sizes differ");
  }
  asn_evidence_records_ = std::move(records);
  asn_evidence_sources_ = std::move(sources);
  asn_evidence_tables_ = std::move(tables);
}

void SnapshotWriter::SetRecords(RecordKind kind, std::vector<uint8_t> bytes, std::vector<uint32_t> offsets) {
  if (kind >= kRecordKindCount) throw std::invalid_argument("snapshot writer: unknown record kind");
  if (offsets.empty() || offsets[0] != 0 || offsets.back() != bytes.size()) {
    throw std::invalid_argument("snapshot writer: record offsets do not match the bytes");
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) throw std::invalid_argument("snapshot writer: record offsets go backwards");
  }
  for (uint8_t b : bytes) {
    if (b < 0x20 || b > 0x7E) throw std::invalid_argument("snapshot writer: records must be printable ASCII");
  }
  records_[kind] = Records{std::move(bytes), std::move(offsets)};
}

template <typename K>
Partition<K>& SnapshotWriter::AsnPartition(Family_<K>* fam, int fi) {
  if (!fam->asn_resolved) {
    stats_.tables[kAsn].prefixes[fi] = fam->prefixes[kAsn].size();
    fam->asn = ResolvePrefixes(&fam->prefixes[kAsn]);
    std::vector<Prefix<K>>().swap(fam->prefixes[kAsn]);
    fam->asn_resolved = true;
  }
  return fam->asn;
}

std::vector<uint32_t> SnapshotWriter::AsnRecordsOf(Family family, const uint8_t* addresses, size_t count) {
  if (compiled_) throw std::logic_error("snapshot writer: already compiled");
  std::vector<uint32_t> out(count);
  auto find = [&](auto* fam, auto zero, size_t width, int fi) {
    using K = decltype(zero);
    const Partition<K>& part = AsnPartition(fam, fi);
    for (size_t i = 0; i < count; ++i) {
      K key = LoadAddress<K>(addresses + width * i);
      size_t at = static_cast<size_t>(std::upper_bound(part.starts.begin(), part.starts.end(), key) - part.starts.begin()) - 1;
      out[i] = part.values[at];  // kNoValue == kNoRecord
    }
  };
  if (family == Family::kV4) {
    find(&v4_, uint32_t{0}, 4, 0);
  } else {
    find(&v6_, u128{0}, 16, 1);
  }
  return out;
}

std::vector<uint64_t> SnapshotWriter::AsnV4AddressCounts() {
  if (compiled_) throw std::logic_error("snapshot writer: already compiled");
  const Partition<uint32_t>& part = AsnPartition(&v4_, 0);
  std::vector<uint64_t> counts;
  for (size_t i = 0; i < part.size(); ++i) {
    if (part.values[i] == kNoValue) continue;
    uint64_t end = i + 1 < part.size() ? part.starts[i + 1] : uint64_t{1} << 32;
    if (part.values[i] >= counts.size()) counts.resize(part.values[i] + 1, 0);
    counts[part.values[i]] += end - part.starts[i];
  }
  return counts;
}

template <typename K>
Partition<K, uint64_t> SnapshotWriter::MergeFamily(Family_<K>* fam, int fi) {
  const uint32_t companies = record_count(kCompanyRecords);
  const uint32_t asns = record_count(kAsnRecords);
  const uint32_t locations = record_count(kLocationRecords);
  const uint32_t sources = record_count(kSourceRecords);
  for (unsigned t = 0; t < kFlagTableCount; ++t) {
    for (const Prefix<K>& p : fam->prefixes[t]) {
      if (p.source >= sources) throw std::invalid_argument("snapshot writer: a prefix names a source past the source records");
    }
  }
  fam->evidence = PrefixEvidenceBlob(fam->prefixes);
  Partition<K> parts[kTableCount + 1];
  for (unsigned t = 0; t < kTableCount; ++t) {
    if (t == kAsn) {
      parts[t] = std::move(AsnPartition(fam, fi));
      for (uint32_t value : parts[t].values) {
        if (value != kNoValue && value >= asns) throw std::invalid_argument("snapshot writer: a value points past its record table");
      }
      continue;
    }
    auto& prefixes = fam->prefixes[t];
    uint32_t limit = t == kGeo ? locations : companies;
    for (const Prefix<K>& p : prefixes) {
      bool ok = p.value < limit || (t < kFlagTableCount && p.value == kListedWithoutCompany);
      if (!ok) throw std::invalid_argument("snapshot writer: a value points past its record table");
      if (t < kFlagTableCount && p.value != kListedWithoutCompany && p.value >= leaf::kMaxProviders) {
        throw std::invalid_argument("snapshot writer: more than " + std::to_string(leaf::kMaxProviders) +
                                    " companies named by flag sources");
      }
    }
    stats_.tables[t].prefixes[fi] = prefixes.size();
    parts[t] = ResolvePrefixes(&prefixes);
    std::vector<Prefix<K>>().swap(prefixes);
  }
  parts[kTableCount] = SpecialPartition<K>();
  std::vector<const Partition<K>*> inputs;
  for (auto& p : parts) inputs.push_back(&p);

  // Provider company: the first flag table (in this order) that names one;
  // without one the answer's company is its ASN's.
  static constexpr Table kCompanyOrder[] = {kVpn, kHosting, kProxy, kTor, kRelay};
  Partition<K, uint64_t> merged = MergePartitions<K>(inputs, [&](const uint32_t* v, const uint8_t* lens) -> uint64_t {
    if (v[kTableCount] != kNoValue) return leaf::kNothing;  // special-purpose address
    uint8_t flags = 0;
    for (unsigned i = 0; i < kFlagTableCount; ++i) {
      if (v[i] != kNoValue) flags |= static_cast<uint8_t>(1u << i);
    }
    uint32_t provider = 0;
    for (Table table : kCompanyOrder) {
      if (v[table] != kNoValue && v[table] != kListedWithoutCompany) {
        provider = v[table] + 1;
        break;
      }
    }
    uint32_t asn = v[kAsn];
    uint8_t asn_len = 0;
    if (asn != kNoValue) {
      asn_len = lens[kAsn];
      flags |= asn_flags_[asn];
    }
    return leaf::Pack(flags, asn_len, provider, asn, v[kGeo]);
  });
  stats_.intervals[fi] = merged.size();
  return merged;
}

std::vector<uint8_t> SnapshotWriter::AsnEvidenceBlob() const {
  struct Entry {
    uint32_t record;
    uint16_t source;
    uint8_t table;
  };
  std::vector<Entry> entries;
  for (size_t i = 0; i < asn_evidence_records_.size(); ++i) {
    Entry e{asn_evidence_records_[i], asn_evidence_sources_[i], asn_evidence_tables_[i]};
    if (e.record >= record_count(kAsnRecords) || e.table >= kFlagTableCount || e.source >= record_count(kSourceRecords) ||
        !(asn_flags_[e.record] >> e.table & 1)) {
      throw std::invalid_argument("snapshot writer: ASN evidence that matches no ASN flag or source");
    }
    entries.push_back(e);
  }
  auto key = [](const Entry& e) { return std::make_tuple(e.record, e.table, e.source); };
  std::sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) { return key(a) < key(b); });
  entries.erase(std::unique(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) { return key(a) == key(b); }),
                entries.end());
  std::vector<uint8_t> blob = EvidenceHeader("EVA1", entries.size());
  for (const Entry& e : entries) {
    Put(&blob, e.record);
    Put(&blob, e.source);
    Put(&blob, e.table);
    Put(&blob, uint8_t{0});
  }
  return blob;
}

const CompileStats& SnapshotWriter::Compile() {
  if (compiled_) return stats_;
  if (record_count(kAsnRecords) >= leaf::kNoAsn || record_count(kLocationRecords) >= leaf::kNoLocation) {
    throw std::invalid_argument("snapshot writer: more ASN records (" + std::to_string(record_count(kAsnRecords)) +
                                ") or locations (" + std::to_string(record_count(kLocationRecords)) +
                                ") than a leaf can number (" + std::to_string(leaf::kNoAsn) + ", " +
                                std::to_string(leaf::kNoLocation) + ")");
  }
  if (asn_companies_.size() != record_count(kAsnRecords)) {
    throw std::invalid_argument("snapshot writer: ASN attributes do not match the ASN records");
  }
  for (uint32_t company : asn_companies_) {
    if (company != kNoRecord && company >= record_count(kCompanyRecords)) {
      throw std::invalid_argument("snapshot writer: an ASN company points past the company records");
    }
  }
  for (uint8_t flags : asn_flags_) {
    if (flags >= (1u << kFlagTableCount)) throw std::invalid_argument("snapshot writer: unknown ASN flags");
  }
  asn_evidence_ = AsnEvidenceBlob();
  {
    Partition<uint32_t, uint64_t> merged = MergeFamily(&v4_, 0);
    v4_.trie = BuildTrieV4(merged.starts, merged.values);
  }
  {
    Partition<u128, uint64_t> merged = MergeFamily(&v6_, 1);
    v6_.trie = BuildTrieV6(merged.starts, merged.values);
  }
  for (int fi = 0; fi < 2; ++fi) {
    const std::vector<uint8_t>& trie = fi == 0 ? v4_.trie : v6_.trie;
    TrieHeader header;
    std::memcpy(&header, trie.data(), sizeof header);
    stats_.nodes[fi] = header.node_count;
    stats_.leaves[fi] = header.leaf_count;
    stats_.trie_bytes[fi] = trie.size();
  }
  compiled_ = true;
  return stats_;
}

void SnapshotWriter::Write(const std::string& path, const std::string& meta_json, uint64_t built_at_ms) {
  if (!compiled_) Compile();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) throw std::runtime_error("snapshot " + path + ": already exists");

  std::vector<uint8_t> meta(meta_json.begin(), meta_json.end());
  std::vector<uint8_t> asn_company(4 * asn_companies_.size());
  if (!asn_company.empty()) std::memcpy(asn_company.data(), asn_companies_.data(), asn_company.size());
  std::vector<uint8_t> record_blobs[kRecordKindCount];
  for (unsigned k = 0; k < kRecordKindCount; ++k) {
    if (records_[k].offsets.empty()) records_[k].offsets.push_back(0);
    record_blobs[k] = RecordTableBlob(records_[k].bytes, records_[k].offsets);
  }
  std::vector<uint8_t>* blobs[kBlobCount] = {&meta,           &v4_.trie,       &v6_.trie,       &asn_company,
                                             &record_blobs[0], &record_blobs[1], &record_blobs[2], &record_blobs[3],
                                             &v4_.evidence,    &v6_.evidence,    &asn_evidence_};

  SnapshotHeader header{};
  std::memcpy(header.magic, "IPRSNAP", 8);
  header.format_version = kFormatVersion;
  for (unsigned k = 0; k < kRecordKindCount; ++k) header.record_counts[k] = record_count(static_cast<RecordKind>(k));
  header.built_at_ms = built_at_ms;
  uint64_t checksum = 0;
  size_t total = sizeof header;
  for (auto* blob : blobs) {
    checksum = Checksum64(blob->data(), blob->size(), checksum);
    total += blob->size();
  }
  header.checksum = checksum;

  MDB_env* env = nullptr;
  MDB_txn* txn = nullptr;
  long page = ::sysconf(_SC_PAGESIZE);
  // Room for the values plus LMDB's own pages: two meta pages, the main
  // tree and one partly used overflow page per value.
  size_t map_size = total + static_cast<size_t>(page) * (8 + 2 * (kBlobCount + 1)) + (size_t{1} << 20);
  map_size = (map_size + static_cast<size_t>(page) - 1) / static_cast<size_t>(page) * static_cast<size_t>(page);
  // The file stays below the map size: refuse before writing anything when even that does not fit.
  std::string space = SpaceNote(path, map_size);
  if (!space.empty()) throw std::runtime_error("snapshot " + path + ": not written" + space);
  auto fail = [&](int rc, const char* what) {
    if (txn != nullptr) mdb_txn_abort(txn);
    if (env != nullptr) mdb_env_close(env);
    ::unlink(path.c_str());
    throw std::runtime_error("snapshot " + path + ": " + what + " failed: " + mdb_strerror(rc) + SpaceNote(path, map_size));
  };
  int rc = mdb_env_create(&env);
  if (rc != 0) fail(rc, "creating the environment");
  if ((rc = mdb_env_set_mapsize(env, map_size)) != 0) fail(rc, "sizing the map");
  if ((rc = mdb_env_open(env, path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644)) != 0) fail(rc, "creating");
  if ((rc = mdb_txn_begin(env, nullptr, 0, &txn)) != 0) fail(rc, "starting the write");
  MDB_dbi dbi;
  if ((rc = mdb_dbi_open(txn, nullptr, 0, &dbi)) != 0) fail(rc, "opening the database");
  auto put = [&](const char* name, const uint8_t* data, size_t size) {
    MDB_val key{std::strlen(name), const_cast<char*>(name)};
    MDB_val val{size, nullptr};
    int r = mdb_put(txn, dbi, &key, &val, MDB_RESERVE);
    if (r != 0) fail(r, "writing an entry");
    if (size != 0) std::memcpy(val.mv_data, data, size);
  };
  put("header", reinterpret_cast<const uint8_t*>(&header), sizeof header);
  for (unsigned i = 0; i < kBlobCount; ++i) {
    put(kBlobNames[i], blobs[i]->data(), blobs[i]->size());
    std::vector<uint8_t>().swap(*blobs[i]);  // LMDB holds its own copy until commit
  }
  rc = mdb_txn_commit(txn);
  txn = nullptr;
  if (rc != 0) fail(rc, "committing");
  if ((rc = mdb_env_sync(env, 1)) != 0) fail(rc, "syncing");
  mdb_env_close(env);
  // The file is on disk; drop the pages this write left in the page cache.
  // Readers then fault it in afresh, as large folios that can be mapped with
  // huge pages, instead of inheriting the small pages of the write.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace ipr
