// scalecomm core: SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), and
// random bytes from the kernel.
//
// Contract: sha256() and hmacSha256() are pure functions of their inputs
// (checked against the FIPS and RFC 4231 test vectors in tests/cpp);
// macEqual() compares in time independent of where the inputs differ.
// randomBytes() reads getrandom(2) and throws Error(Io) if the kernel gives
// fewer bytes. Thread safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace scalecomm {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const void* data, size_t bytes);
Digest hmacSha256(const std::string& key, const void* data, size_t bytes);
bool macEqual(const Digest& a, const Digest& b);
std::string randomBytes(size_t n);
std::string toHex(const void* data, size_t bytes);

}  // namespace scalecomm
