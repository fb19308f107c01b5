// Internal: how a rank other than 0 attaches to an shm group's segment without being fooled by
// one a crashed run left behind: the segment must be the one the name refers to now, initialised,
// and created by a process that is still alive; otherwise it is let go and the name re-opened
// until rank 0 has replaced it (or the connect timeout).
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace weft::comm::detail {

/// True when shared memory `name` exists and is the object with this device and inode.
inline bool shm_name_refers_to(const std::string& name, dev_t dev, ino_t ino) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0600);
  if (fd < 0) return false;
  struct stat st {};
  const bool same = ::fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
  ::close(fd);
  return same;
}

/// Maps the current, live segment `name` of `bytes` bytes whose Header has `magic` (published
/// last by rank 0) and pids[0] (rank 0's pid, written before the magic). A segment the name no
/// longer refers to, one never finished, or one whose creator has exited is skipped: that is a
/// crashed run's leftover, which rank 0 of this run removes and replaces. Throws errc::timeout at
/// `until`, errc::io when mapping fails. O(1) per attempt, polling every 2 ms.
template <class Header>
std::byte* shm_attach_current(const std::string& name, std::size_t bytes, std::uint64_t magic, int rank, deadline until,
                              const char* where) {
  std::string last = "it does not exist";
  for (;;) {
    expects(clock_type::now() < until, errc::timeout, where, "rank ", rank, ": shared memory '", name,
            "' was not created by rank 0 within the connect timeout (", last, ")");
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    struct stat st {};
    const bool sized = ::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= bytes;
    if (!sized) {
      ::close(fd);
      last = "it is smaller than this rank's size and ring_bytes need, or not sized yet";
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    expects(p != MAP_FAILED, errc::io, where, "cannot map shared memory '", name, "': ", std::strerror(errno));
    auto& h = *static_cast<Header*>(p);
    // Wait for rank 0 to publish, as long as the name still refers to this object.
    while (h.magic.load(std::memory_order_acquire) != magic && shm_name_refers_to(name, st.st_dev, st.st_ino) &&
           clock_type::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool published = h.magic.load(std::memory_order_acquire) == magic;
    const pid_t creator = published ? static_cast<pid_t>(h.pids[0]) : 0;
    const bool creator_alive = creator > 0 && (::kill(creator, 0) == 0 || errno == EPERM);
    if (published && creator_alive && shm_name_refers_to(name, st.st_dev, st.st_ino)) return static_cast<std::byte*>(p);
    last = !published ? "it was never initialised" : "it was left by a run whose rank 0 has exited";
    ::munmap(p, bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace weft::comm::detail
