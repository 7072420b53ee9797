// OpenSSL-backed implementations of the helpers in crypto.h.
#include "util/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace agentq::crypto {

namespace {
constexpr char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += k_b64[(v >> 18) & 63];
    out += k_b64[(v >> 12) & 63];
    out += k_b64[(v >> 6) & 63];
    out += k_b64[v & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += k_b64[(v >> 18) & 63];
    out += k_b64[(v >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += k_b64[(v >> 18) & 63];
    out += k_b64[(v >> 12) & 63];
    out += k_b64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int n_pad = 0;
    for (int j = 0; j < 4; ++j) {
      char c = text[i + j];
      if (c == '=') {
        // padding only in the last group, only in its last two places
        if (i + 4 != text.size() || j < 2) return std::nullopt;
        v[j] = 0;
        ++n_pad;
      } else {
        if (n_pad > 0) return std::nullopt;
        v[j] = b64_value(c);
        if (v[j] < 0) return std::nullopt;
      }
    }
    uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += char((w >> 16) & 0xff);
    if (n_pad < 2) out += char((w >> 8) & 0xff);
    if (n_pad < 1) out += char(w & 0xff);
  }
  return out;
}

std::string sha256(std::string_view bytes) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  // NOTE: OpenSSL 3's SHA256() fetches the algorithm from its providers on every call
  // (EVP_Q_digest: a lookup under a lock, a context made and freed): about a third of
  // authenticating a request, which hashes its bearer key (session 23). Fetched once here, one
  // context per thread; SHA256() if either cannot be had.
  static EVP_MD* const k_md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned int n = 0;
  if (k_md && ctx && EVP_DigestInit_ex2(ctx.get(), k_md, nullptr) == 1 &&
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) == 1 && EVP_DigestFinal_ex(ctx.get(), md, &n) == 1 &&
      n == sizeof md)
    return std::string(reinterpret_cast<char*>(md), sizeof md);
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), md);
  return std::string(reinterpret_cast<char*>(md), sizeof md);
}

std::string to_hex(std::string_view bytes) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += k_hex[c >> 4];
    out += k_hex[c & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) { return to_hex(sha256(bytes)); }

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n_md = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), md, &n_md);
  return std::string(reinterpret_cast<char*>(md), n_md);
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), int(n)) != 1) {
    std::fprintf(stderr, "agentq: RAND_bytes failed (%s:%d)\n", __FILE__, __LINE__);
    std::abort();
  }
  return out;
}

std::string random_token(size_t n_bytes) {
  static constexpr char k_alpha[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string raw = random_bytes(n_bytes);
  std::string out;
  // 5 bits per char, LSB-first over the byte stream
  uint32_t acc = 0;
  int n_bits = 0;
  for (unsigned char c : raw) {
    acc |= uint32_t(c) << n_bits;
    n_bits += 8;
    while (n_bits >= 5) {
      out += k_alpha[acc & 31];
      acc >>= 5;
      n_bits -= 5;
    }
  }
  if (n_bits > 0) out += k_alpha[acc & 31];
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace agentq::crypto
