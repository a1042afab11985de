// XXH64 (the algorithm of the public xxHash specification), used to detect
// corruption of snapshot blobs. Not a defence against a deliberate forger:
// snapshots are trusted to the operator who can write the data folder.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ipr {

uint64_t Checksum64(const uint8_t* data, size_t size, uint64_t seed);

}  // namespace ipr
