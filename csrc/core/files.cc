#include "core/files.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/hmac.h"

namespace scalecomm {

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

bool readSmallFile(const std::string& path, size_t maxBytes, bool ownedByUs, std::string& text, std::string& why) {
  text.clear();
  why.clear();
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (ownedByUs ? O_NOFOLLOW : 0);
  Fd f{::open(path.c_str(), flags)};
  if (f.fd < 0) {
    if (errno == ENOENT) return false;
    why = errno == ELOOP ? "it is a symbolic link" : std::strerror(errno);
    return false;
  }
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) {
    why = std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "it is not a regular file (a FIFO, device or directory is never read as settings)";
    return false;
  }
  if (ownedByUs && st.st_uid != ::geteuid()) {
    why = strCat("it is owned by uid ", st.st_uid, ", not by this process's user (uid ", ::geteuid(), ")");
    return false;
  }
  if (ownedByUs && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    why = "other users may write it (group or world writable)";
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    why = strCat("it holds ", st.st_size, " bytes, more than the ", maxBytes, " a settings file may");
    return false;
  }
  std::vector<char> buf(maxBytes + 1);
  size_t got = 0;
  while (got <= maxBytes) {
    const ssize_t n = ::read(f.fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > maxBytes) {
    why = strCat("it grew past the ", maxBytes, " bytes a settings file may hold while being read");
    return false;
  }
  text.assign(buf.data(), got);
  return true;
}

bool writeFileAtomically(const std::string& path, const std::string& text, std::string& why) {
  why.clear();
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    for (size_t i = 1; i <= slash; ++i) {  // mkdir -p (errors surface at the open below)
      if (i == slash || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0700);
    }
  }
  const std::string tmp = path + ".tmp-" + toHex(randomBytes(8).data(), 8);
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
  if (f.fd < 0) {
    why = strCat("cannot create ", tmp, ": ", std::strerror(errno));
    return false;
  }
  size_t put = 0;
  while (put < text.size()) {
    const ssize_t n = ::write(f.fd, text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = strCat("cannot write ", tmp, ": ", std::strerror(errno));
      ::unlink(tmp.c_str());
      return false;
    }
    put += static_cast<size_t>(n);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    why = strCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::string userCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return xdg;
  const char* home = std::getenv("HOME");
  if (home && home[0] == '/') return std::string(home) + "/.cache";
  std::vector<char> buf(16384);
  struct passwd pw{};
  struct passwd* found = nullptr;
  if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr && pw.pw_dir &&
      pw.pw_dir[0] == '/')
    return std::string(pw.pw_dir) + "/.cache";
  return "";
}

}  // namespace scalecomm
