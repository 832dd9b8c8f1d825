#include "core/digest.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace pacheck {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : st_(std::make_unique<State>()) {
  st_->ctx = EVP_MD_CTX_new();
  if (!st_->ctx || EVP_DigestInit_ex(st_->ctx, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: OpenSSL could not initialise a SHA-256 context");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t bytes) {
  if (bytes && EVP_DigestUpdate(st_->ctx, data, bytes) != 1) throw std::runtime_error("sha256: digest update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(st_->ctx, md, &len) != 1) throw std::runtime_error("sha256: digest final failed");
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(digits[md[i] >> 4]);
    out.push_back(digits[md[i] & 15]);
  }
  return out;
}

std::string sha256_of(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error("error reading '" + path + "'");
  return h.hex();
}

}  // namespace pacheck
