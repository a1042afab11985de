#include "change_counter.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace ipr {

uint32_t* MapChangeCounter(const std::string& path, std::string* error) {
  // By file, not by path: a folder removed and made again under the same
  // name holds another counter, which writers in other processes bump.
  static std::mutex mu;
  static std::map<std::pair<dev_t, ino_t>, uint32_t*> mapped;  // never unmapped: see the header
  std::lock_guard<std::mutex> lock(mu);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  // Two processes may create it at once: growing to one page is idempotent,
  // and a new file's bytes read as zero.
  if (fstat(fd, &st) != 0 || (st.st_size < static_cast<off_t>(kChangeCounterBytes) && ftruncate(fd, kChangeCounterBytes) != 0)) {
    *error = path + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  auto found = mapped.find({st.st_dev, st.st_ino});
  if (found != mapped.end()) {
    close(fd);
    return found->second;
  }
  void* map = mmap(nullptr, kChangeCounterBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  auto* counter = static_cast<uint32_t*>(map);
  mapped.emplace(std::make_pair(st.st_dev, st.st_ino), counter);
  return counter;
}

}  // namespace ipr
