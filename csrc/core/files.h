// scalecomm core: reading and writing the small files scalecomm keeps
// (the tuning cache), safely in directories other users may share.
//
// Contract:
// - readSmallFile() reads a regular file of at most maxBytes. It never
//   blocks on a FIFO or device (opened non-blocking, then fstat'ed: anything
//   but a regular file is refused) and never reads past maxBytes (/dev/zero
//   cannot exhaust memory). With `ownedByUs` it also refuses a file that is
//   not owned by this process's effective uid or that other users may write
//   (group or world writable), and does not follow a symlink in the last
//   component. Missing: false with `why` empty; refused: false with `why`.
// - writeFileAtomically() writes `text` to a fresh temporary file in the
//   target's directory (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, an unguessable
//   name), then renames it over `path`: a planted file or symlink is never
//   written through, and readers see the old or the new file whole. The
//   directory is made (mode 0700) where missing. False with `why` on failure
//   (the temporary file is removed).
// - userCacheDir() is $XDG_CACHE_HOME, else $HOME/.cache, else the effective
//   user's home directory from the password database + "/.cache"; "" when
//   none is known (no shared fallback such as /tmp).
// Thread safe (no shared state).
#pragma once

#include <cstddef>
#include <string>

namespace scalecomm {

bool readSmallFile(const std::string& path, size_t maxBytes, bool ownedByUs, std::string& text, std::string& why);
bool writeFileAtomically(const std::string& path, const std::string& text, std::string& why);
std::string userCacheDir();

}  // namespace scalecomm
