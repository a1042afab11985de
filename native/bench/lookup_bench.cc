// Native lookup throughput over a real snapshot, without Node.
//
//   lookup_bench SNAPSHOT_FILE ADDRESS_FILE [REPEAT]
//
// ADDRESS_FILE holds one address per line: the seeded set the JS trials use
// (bench/addresses.js), so both sides look up the same addresses. Each is
// parsed once; the set is repeated REPEAT times (default 10) per mode. Prints
// one JSON object per mode and family:
//   single     one Lookup() after another (the CPU may overlap neighbours);
//   dependent  each address depends on the previous answer, so lookups cannot
//              overlap: the latency one JS call after another sees;
//   batch      LookupBatch(), which interleaves walks so cache misses overlap.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "snapshot.h"

using ipr::ParsedAddress;
using ipr::Snapshot;
using ipr::Answer;

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A checksum of the answers, so the compiler cannot drop the lookups.
uint64_t Fold(uint64_t acc, const Answer& t) {
  return acc * 31 + t.flags + t.asn + t.location + t.company + t.asn_len;
}

void Report(const char* mode, const char* family, size_t n, double seconds, uint64_t check) {
  std::printf("{\"mode\":\"%s\",\"family\":\"%s\",\"lookups\":%zu,\"seconds\":%.4f,\"per_second\":%.0f,"
              "\"ns_per_lookup\":%.1f,\"check\":%llu}\n",
              mode, family, n, seconds, n / seconds, seconds * 1e9 / n, static_cast<unsigned long long>(check));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SNAPSHOT_FILE ADDRESS_FILE [REPEAT]\n", argv[0]);
    return 2;
  }
  size_t repeat = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 10;
  ipr::SnapshotError error;
  std::shared_ptr<const Snapshot> snapshot = Snapshot::Open(argv[1], &error);
  if (!snapshot) {
    std::fprintf(stderr, "%s\n", error.message.c_str());
    return 1;
  }
  // The figures assume what the writer promises (trie.h): nodes start on a
  // cache line in the map. A misaligned snapshot would measure a writer bug.
  for (const uint8_t* nodes : {snapshot->trie4().nodes(), snapshot->trie6().nodes()}) {
    if (reinterpret_cast<uintptr_t>(nodes) % 64 != 0) {
      std::fprintf(stderr, "trie nodes are not aligned to a cache line in the map\n");
      return 1;
    }
  }
  std::vector<ParsedAddress> by_family[2];
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    ParsedAddress a;
    if (!ipr::ParseAddress(line.data(), line.size(), &a)) {
      std::fprintf(stderr, "not an address: %s\n", line.c_str());
      return 1;
    }
    by_family[a.family == ipr::Family::kV4 ? 0 : 1].push_back(a);
  }
  for (auto& addrs : by_family) {
    size_t base = addrs.size();
    for (size_t r = 1; r < repeat; ++r) addrs.insert(addrs.end(), addrs.begin(), addrs.begin() + base);
  }

  for (int round = 0; round < 2; ++round) {  // the first round warms the page cache
    for (int fam = 0; fam < 2; ++fam) {
      const std::vector<ParsedAddress>& addrs = by_family[fam];
      size_t n = addrs.size();
      if (n == 0) continue;
      const char* name = fam == 0 ? "ipv4" : "ipv6";
      uint64_t check = 0;
      auto start = std::chrono::steady_clock::now();
      for (const ParsedAddress& a : addrs) check = Fold(check, snapshot->Lookup(a));
      if (round == 1) Report("single", name, n, Seconds(start), check);

      check = 0;
      uint32_t carry = 0;
      start = std::chrono::steady_clock::now();
      for (ParsedAddress a : addrs) {
        a.v4 ^= carry;
        a.v6 ^= carry;
        Answer t = snapshot->Lookup(a);
        check = Fold(check, t);
        carry = (t.flags & 0x80) | (t.asn_len & 0x80);  // always 0, but the compiler cannot know
      }
      if (round == 1) Report("dependent", name, n, Seconds(start), check);

      std::vector<Answer> out(n);
      start = std::chrono::steady_clock::now();
      snapshot->LookupBatch(addrs.data(), n, out.data());
      double seconds = Seconds(start);
      uint64_t batch_check = 0;
      for (const Answer& t : out) batch_check = Fold(batch_check, t);
      if (round == 1) Report("batch", name, n, seconds, batch_check);
      if (batch_check != check) {
        std::fprintf(stderr, "batch and single lookups disagree (%s)\n", name);
        return 1;
      }
    }
  }
  return 0;
}
