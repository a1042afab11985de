// A 32-bit counter that every process mapping the same file shares: the
// account store bumps it after each commit that can change an answer (a key
// revoked, an account suspended...), and a server's workers compare it on
// every request with the value their cached grants were read at. One load
// per request instead of a read of the store.
//
// Lifetime: a file is mapped once per process and never unmapped
// (4 KiB each; a process opens one or two), so a view handed to JavaScript
// stays valid for the life of the process whatever the caller does.
//
// Ordering: Bump() is a sequentially consistent atomic add on the shared page,
// atomic across processes too (a lost increment could leave a reader's stale
// cache looking current). A writer bumps after its transaction commits; a
// reader loads the counter, then reads the store: whoever sees the new value
// reads the committed data.
#pragma once

#include <cstdint>
#include <string>

namespace ipr {

// The counter of `path`, created (zero, mode 0600) when the file does not
// exist. Null with `error` set when the file cannot be opened or mapped.
uint32_t* MapChangeCounter(const std::string& path, std::string* error);

inline uint32_t BumpChangeCounter(uint32_t* counter) { return __atomic_add_fetch(counter, 1, __ATOMIC_SEQ_CST); }

// The size of the mapping (and of the file): one page.
constexpr size_t kChangeCounterBytes = 4096;

}  // namespace ipr
