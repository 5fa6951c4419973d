// What scalecomm trusts on the local machine: peers' shared-memory segments
// (only its own user's, mode 0600, proving the group's key) and the files it
// reads as settings or writes as its cache (small regular files; never
// written through a planted name).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "harness.h"
#include "transport/shm.h"

using namespace scalecomm;

namespace {

// The error open() raises for `name`, or "" when it maps the segment.
std::string openError(const std::string& name) {
  try {
    ShmSegment::open(name, 0, 2);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string tempDir() {
  char tmpl[] = "/tmp/scalecomm-trust-XXXXXX";
  SC_CHECK(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(a_peer_segment_is_mapped_only_when_private_to_this_user) {
  auto seg = ShmSegment::create(0, 2, 4096, 0);
  const std::string name = seg->name();
  CHECK_EQ(openError(name), std::string());
  const std::string path = "/dev/shm" + name;
  CHECK(::chmod(path.c_str(), 0666) == 0);  // what an impostor's own segment would be
  const std::string open = openError(name);
  CHECK(contains(open, "its mode is 0666, not 0600") && contains(open, "posing as rank 0"));
  CHECK(::chmod(path.c_str(), 0600) == 0);
  if (::geteuid() == 0) {  // a segment of another user (making one needs root)
    CHECK(::chown(path.c_str(), 65534, 65534) == 0);
    CHECK(contains(openError(name), "owned by uid 65534"));
    CHECK(::chown(path.c_str(), 0, 0) == 0);
  }
  CHECK_EQ(openError(name), std::string());
}

TEST(a_segment_proves_the_key_it_was_made_with) {
  auto seg = ShmSegment::create(0, 2, 4096, 0);
  auto peerView = ShmSegment::open(seg->name(), 0, 2);
  CHECK(!peerView->provesKey("nonce+secret"));  // nothing written yet
  seg->proveKey("nonce+secret");
  CHECK(peerView->provesKey("nonce+secret"));
  CHECK(!peerView->provesKey("nonce+guess"));
}

TEST(settings_files_are_small_regular_files) {
  const std::string dir = tempDir();
  std::string text, why;
  CHECK(!readSmallFile(dir + "/missing", 1024, false, text, why) && why.empty());
  {
    std::ofstream(dir + "/ok") << "allreduce 8 ring\n";
  }
  CHECK(readSmallFile(dir + "/ok", 1024, true, text, why) && text == "allreduce 8 ring\n");
  CHECK(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);  // a plain open() would block here
  CHECK(!readSmallFile(dir + "/fifo", 1024, false, text, why) && contains(why, "not a regular file"));
  CHECK(!readSmallFile("/dev/zero", 1024, false, text, why) && contains(why, "not a regular file"));
  CHECK(::truncate((dir + "/ok").c_str(), 4096) == 0);
  CHECK(!readSmallFile(dir + "/ok", 1024, false, text, why) && contains(why, "more than the 1024"));
  CHECK(::symlink((dir + "/ok").c_str(), (dir + "/link").c_str()) == 0);
  CHECK(readSmallFile(dir + "/link", 8192, false, text, why));  // named by the user: followed
  CHECK(!readSmallFile(dir + "/link", 8192, true, text, why) && contains(why, "symbolic link"));
  CHECK(::chmod((dir + "/ok").c_str(), 0666) == 0);
  CHECK(!readSmallFile(dir + "/ok", 8192, true, text, why) && contains(why, "other users may write"));
  (void)!std::system(("rm -rf " + dir).c_str());
}

TEST(the_cache_is_never_written_through_a_planted_name) {
  const std::string dir = tempDir();
  const std::string victim = dir + "/victim", path = dir + "/sub/cache.txt";
  {
    std::ofstream(victim) << "precious\n";
  }
  std::string why;
  CHECK(writeFileAtomically(path, "first\n", why));  // makes its directory
  CHECK(::unlink(path.c_str()) == 0);
  CHECK(::symlink(victim.c_str(), path.c_str()) == 0);
  CHECK(writeFileAtomically(path, "second\n", why));
  CHECK_EQ(slurp(victim), std::string("precious\n"));
  struct stat st{};
  CHECK(::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
  CHECK_EQ(slurp(path), std::string("second\n"));
  (void)!std::system(("rm -rf " + dir).c_str());
}

TEST_MAIN()
