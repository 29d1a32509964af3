// FileStore: one file per key in a shared directory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "transport/backoff.h"
#include "transport/transport.h"
#include "transport/crypto.h"
#include "transport/store_wire.h"

namespace ciuic::transport {
namespace {

using Clock = std::chrono::steady_clock;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Reads a whole file. kNotFound when it does not exist.
StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(path);
    return UnavailableError(Errno("cannot open", path));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t r = read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const Status s = UnavailableError(Errno("cannot read", path));
      close(fd);
      return s;
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  close(fd);
  return out;
}

// Writes `value` to a temporary file in `dir` and renames it onto `path`,
// so readers see either no file or the whole value.
Status WriteAtomically(const std::string& dir, const std::string& path, const std::string& value) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = dir + "/.tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return UnavailableError(Errno("cannot create", tmp));
  size_t done = 0;
  while (done < value.size()) {
    const ssize_t w = write(fd, value.data() + done, value.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      Status s = UnavailableError(Errno("cannot write", tmp));
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(w);
  }
  if (close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = UnavailableError(Errno("cannot write", path));
    unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("FileStore directory is empty");
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return UnavailableError(Errno("cannot create store directory", dir));
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return UnavailableError("store directory " + dir + " is not an accessible directory");
  }
  return std::unique_ptr<FileStore>(new FileStore(dir));
}

// Keys made of safe characters keep a readable name; others (and long ones)
// are named by their SHA-256.
std::string FileStore::PathOf(const std::string& key) const {
  bool plain = key.size() <= 200 && key[0] != '.';
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    plain = plain && ok;
  }
  return dir_ + "/" + (plain ? "k_" + key : "h_" + ToHex(Sha256Of(key)));
}

Status FileStore::Set(const std::string& key, const std::string& value) {
  CIUIC_RETURN_IF_ERROR(CheckStoreKey(key));
  if (value.size() > kMaxValueBytes) {
    return InvalidArgumentError("value of " + std::to_string(value.size()) + " bytes for key '" + key +
                                "' exceeds " + std::to_string(kMaxValueBytes));
  }
  return WriteAtomically(dir_, PathOf(key), value);
}

StatusOr<std::string> FileStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  CIUIC_RETURN_IF_ERROR(CheckStoreKey(key));
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds step(1);
  const std::string path = PathOf(key);
  for (;;) {
    StatusOr<std::string> v = ReadFile(path);
    if (v.ok() || v.status().code() != StatusCode::kNotFound) return v;
    if (!Backoff(&step, deadline, std::chrono::milliseconds(50))) {
      return DeadlineExceededError("store key '" + key + "' was not set within " +
                                   std::to_string(timeout.count()) + " ms (file store " + dir_ + ")");
    }
  }
}

Status FileStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const std::string& k : keys) CIUIC_RETURN_IF_ERROR(CheckStoreKey(k));
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds step(1);
  for (const std::string& key : keys) {
    const std::string path = PathOf(key);
    while (access(path.c_str(), F_OK) != 0) {
      if (!Backoff(&step, deadline, std::chrono::milliseconds(50))) {
        return DeadlineExceededError("store key '" + key + "' was not set within " +
                                     std::to_string(timeout.count()) + " ms (file store " + dir_ + ")");
      }
    }
  }
  return Status::Ok();
}

StatusOr<int64_t> FileStore::Add(const std::string& key, int64_t delta) {
  CIUIC_RETURN_IF_ERROR(CheckStoreKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string lock_path = dir_ + "/.lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return UnavailableError(Errno("cannot open", lock_path));
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  while (fcntl(fd, F_SETLKW, &fl) != 0) {
    if (errno != EINTR) {
      const Status s = UnavailableError(Errno("cannot lock", lock_path));
      close(fd);
      return s;
    }
  }
  StatusOr<int64_t> result = [&]() -> StatusOr<int64_t> {
    const std::string path = PathOf(key);
    int64_t cur = 0;
    StatusOr<std::string> v = ReadFile(path);
    if (v.ok()) {
      // The tcp store's parser: both stores take the same texts as counters.
      if (!store_wire::ParseCounter(*v, &cur)) {
        return FailedPreconditionError("key '" + key + "' holds a value that is not a counter");
      }
    } else if (v.status().code() != StatusCode::kNotFound) {
      return v.status();
    }
    const int64_t next = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
    CIUIC_RETURN_IF_ERROR(WriteAtomically(dir_, path, std::to_string(next)));
    return next;
  }();
  close(fd);  // releases the lock
  return result;
}

}  // namespace ciuic::transport
