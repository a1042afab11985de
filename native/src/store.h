// The snapshot published in one data folder, shared by every thread of the
// process.
//
// Publication (src/pipeline/publish.ts): a snapshot file is written under
// <data>/snapshots/, then <data>/snapshots/CURRENT is atomically replaced by a
// file holding its name. A Store maps the named file once per process; every
// handle in every worker thread reads through it.
//
// Swapping: Refresh() opens the newly named file off the lookup path, then
// replaces `current_` and bumps `generation_`. A handle notices the new
// generation on its next lookup (one relaxed atomic load when nothing changed)
// and drops its reference to the old snapshot; the old mapping is closed when
// the last handle has moved on, never during a lookup.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "snapshot.h"

namespace ipr {

class Store {
 public:
  // The process-wide store of `dir`, opening its published snapshot on first use.
  static std::shared_ptr<Store> Acquire(const std::string& dir, SnapshotError* error);

  // Updates the caller's (snapshot, generation) pair when a newer snapshot was swapped in.
  void Sync(std::shared_ptr<const Snapshot>* snapshot, uint64_t* generation) const {
    if (generation_.load(std::memory_order_acquire) == *generation) return;
    std::lock_guard<std::mutex> lock(mu_);
    *snapshot = current_;
    *generation = generation_.load(std::memory_order_relaxed);
  }

  enum class RefreshResult { kUnchanged, kSwapped, kFailed };
  // Re-reads CURRENT and swaps to the snapshot it names if that is new and
  // valid. A snapshot that failed to open is not retried until CURRENT names
  // another one; the current snapshot keeps serving meanwhile. When CURRENT
  // still names the snapshot being served and its file was written to since
  // it was last checked, verifies it again: kFailed with snapshot_damaged
  // when it no longer matches (reported once per change of the file).
  RefreshResult Refresh(SnapshotError* error);

  const std::string& dir() const { return dir_; }

 private:
  explicit Store(std::string dir) : dir_(std::move(dir)) {}
  bool ReadCurrentName(std::string* name, SnapshotError* error) const;

  const std::string dir_;
  mutable std::mutex mu_;  // guards current_ and current_name_
  std::shared_ptr<const Snapshot> current_;
  std::string current_name_;
  std::atomic<uint64_t> generation_{0};
  std::mutex refresh_mu_;  // one refresh at a time; guards failed_name_ and checked_stamp_
  std::string failed_name_;
  FileStamp checked_stamp_;  // of the current snapshot's file when it was last verified
};

}  // namespace ipr
