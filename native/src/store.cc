#include "store.h"

#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>

namespace ipr {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<Store>> stores;
};

// Never destroyed: worker threads may still release stores while the
// process runs its static destructors.
Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

bool ValidSnapshotName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<Store> Store::Acquire(const std::string& dir, SnapshotError* error) {
  char resolved[PATH_MAX];
  if (::realpath(dir.c_str(), resolved) == nullptr) {
    *error = SnapshotError{ErrorCode::kSnapshotMissing, "data folder " + dir + " does not exist"};
    return nullptr;
  }
  std::string key(resolved);
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  if (std::shared_ptr<Store> existing = registry.stores[key].lock()) return existing;
  std::shared_ptr<Store> store(new Store(key));
  if (store->Refresh(error) != RefreshResult::kSwapped) return nullptr;
  registry.stores[key] = store;
  return store;
}

bool Store::ReadCurrentName(std::string* name, SnapshotError* error) const {
  std::string pointer = dir_ + "/snapshots/CURRENT";
  std::ifstream in(pointer);
  if (!in) {
    *error = SnapshotError{ErrorCode::kSnapshotMissing, "no snapshot published in " + dir_ + " (" + pointer +
                                                   " is missing; run `ipr build`)"};
    return false;
  }
  std::string text;
  std::getline(in, text);
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (!ValidSnapshotName(text)) {
    *error = SnapshotError{ErrorCode::kSnapshotInvalid, pointer + " does not name a snapshot file"};
    return false;
  }
  *name = text;
  return true;
}

Store::RefreshResult Store::Refresh(SnapshotError* error) {
  std::lock_guard<std::mutex> refresh_lock(refresh_mu_);
  std::string name;
  if (!ReadCurrentName(&name, error)) return RefreshResult::kFailed;
  std::shared_ptr<const Snapshot> served;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (name == current_name_) served = current_;
  }
  if (served) {
    FileStamp now = served->Stamp();
    if (now == checked_stamp_) return RefreshResult::kUnchanged;
    checked_stamp_ = now;
    return served->Verify(now, error) ? RefreshResult::kUnchanged : RefreshResult::kFailed;
  }
  if (name == failed_name_) return RefreshResult::kUnchanged;
  std::shared_ptr<const Snapshot> snapshot = Snapshot::Open(dir_ + "/snapshots/" + name, error);
  if (!snapshot) {
    failed_name_ = name;
    return RefreshResult::kFailed;
  }
  checked_stamp_ = snapshot->opened_stamp();
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(snapshot);
  current_name_ = name;
  generation_.fetch_add(1, std::memory_order_release);
  return RefreshResult::kSwapped;
}

}  // namespace ipr
