// SHA-256 digests: of plugin libraries (so a report ties results to the exact binary that produced them)
// and of exported case inputs (so `pacheck score` can match a foreign output to the inputs it was
// computed from).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace pacheck {

/// Incremental SHA-256 (FIPS 180-4), backed by OpenSSL's EVP interface.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  /// Appends `bytes` bytes at `data` to the message.
  void update(const void* data, std::size_t bytes);
  /// The digest of everything appended, as 64 lower-case hex digits. Ends the message: call once.
  std::string hex();

 private:
  struct State;
  std::unique_ptr<State> st_;
};

/// SHA-256 of `bytes` as 64 lower-case hex digits.
std::string sha256_of(const std::string& bytes);

/// SHA-256 of a file's bytes as 64 lower-case hex digits. Throws std::runtime_error naming the file when it
/// cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace pacheck
