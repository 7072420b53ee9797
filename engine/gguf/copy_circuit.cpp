// Hand-built induction weights for synthetic llama models (copy_circuit.h): the rows the
// circuit adds to token_embd, layer 0 (offset heads), the later layers' attention (induction
// heads) and output.weight, computed row by row.
#include "gguf/copy_circuit.h"

#include <algorithm>
#include <cmath>

#include "gguf/synthetic.h"

namespace agentq::gguf {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Target attention scores (nats): an offset head's peak, and a full D-token match of an
// induction head. NOTE: the offset head's nearest rival is ~0.1 of the peak below it, so the
// peak must be large; an induction head's rivals are crosstalk, kept well below 30.
constexpr float peak_pos = 200.0f, peak_ind = 30.0f;
constexpr float logit_top = 25.0f;   // logit of a token every induction head votes for
constexpr int64_t design_dist = 512;  // the induction heads' RoPE pairs turn < 1 rad this far
constexpr int64_t max_offsets = 8;    // D at most: tokens an induction head matches

// "blk.L.name" -> L and name; -1 for other tensors.
int layer_of(const std::string& t, std::string* rest) {
  if (t.rfind("blk.", 0) != 0) return -1;
  const size_t dot = t.find('.', 4);
  *rest = t.substr(dot + 1);
  return std::stoi(t.substr(4, dot - 4));
}

}  // namespace

std::optional<copy_circuit> copy_circuit::make(const synthetic_spec& sp, std::string* error) {
  copy_circuit c;
  c.n_embd_ = sp.n_embd;
  c.hd_ = sp.head_dim > 0 ? sp.head_dim : sp.n_embd / sp.n_head;
  c.n_kv_ = sp.n_head_kv;
  c.grp_ = sp.n_head / sp.n_head_kv;
  c.rope_base_ = sp.rope_base;
  c.seed_ = sp.seed;
  if (sp.sigma > 0) c.sigma_bg_ = sp.sigma;
  // Tokens an induction head matches: one kv head per offset in layer 0, and A, B1..BD, C and
  // beta must fit. NOTE: two or three loop on code (the latest earlier occurrence of a short
  // n-gram is often the model's own output, or a later line); six still looped at Q4_K, eight
  // did not on the benchmark's passage (docs/speculative.md).
  c.m_ = c.hd_;
  c.n_off_ = std::min<int64_t>({max_offsets, c.n_kv_, (c.n_embd_ - 1) / c.hd_ - 2});
  if (sp.arch != "llama" || sp.tied || sp.n_layer < 2 || c.n_off_ < 2 || c.hd_ < 32 || (sp.n_rot > 0 && sp.n_rot != c.hd_)) {
    *error = "copy heads need an untied llama shape with >= 2 layers, >= 2 kv heads, head_dim >= 32 and n_embd >= 4 * head_dim + 1";
    return std::nullopt;
  }
  const int64_t n_pairs = c.hd_ / 2;
  // Low-frequency pairs: theta_p = base^(-2p/hd) with theta_p * design_dist <= 1.
  c.low_pair_ = int64_t(std::ceil(double(n_pairs) * std::log(double(design_dist)) / std::log(double(c.rope_base_))));
  if (c.low_pair_ >= n_pairs - 4 || c.low_pair_ < c.n_pos_pairs_) {
    *error = "copy heads: rope base too small for this head_dim";
    return std::nullopt;
  }
  const float d = float(c.n_embd_), m = float(c.m_), hd = float(c.hd_);
  c.beta_ = 2.0f * std::sqrt(d);  // beta^2 = 4 n_embd: the RMS barely depends on the codes
  const float rms0 = std::sqrt((m + c.beta_ * c.beta_) / d);           // layer 0 input: A, beta
  const float n_codes = float(c.n_off_ + 1);
  const float rms1 = std::sqrt((n_codes * m + c.beta_ * c.beta_) / d);       // layers 1..: A, B1..BD, beta
  const float rmsf = std::sqrt((n_codes * m + hd + c.beta_ * c.beta_) / d);  // output norm: + C
  const float xb0 = c.beta_ / rms0;                                    // normed beta at layer 0
  // offset head: score = x_b^2 s^2 * n_pos_pairs / sqrt(hd) at the peak
  c.s_pos_ = std::sqrt(peak_pos * std::sqrt(hd) / (float(c.n_pos_pairs_) * xb0 * xb0));
  c.s_o0_ = rms0;  // value = c/rms0 -> B = c
  // induction head: q.k = s^2 (M r) D / rms1^2 for a full match (r low dims)
  const float r = float(2 * (n_pairs - c.low_pair_));
  c.s_ind_ = std::sqrt(peak_ind * rms1 * rms1 * std::sqrt(hd) / (m * r * float(c.n_off_)));
  c.s_o1_ = rms1 / float(c.n_kv_ * (sp.n_layer - 1));  // C = mean of every head's vote
  c.s_out_ = logit_top * rmsf / hd;
  return c;
}

float copy_circuit::code(uint64_t salt, int64_t a, int64_t b) const {
  const uint64_t h = splitmix(seed_ * 0x100000001b3ull ^ splitmix(salt ^ splitmix(uint64_t(a) * 0x9e37ull + uint64_t(b))));
  return (h >> 63) ? 1.0f : -1.0f;
}

// Layer 0: kv head k-1 attends to offset k (RoPE-only q and k from beta) and copies A into Bk,
// k = 1..D.
void copy_circuit::layer0(const std::string& t, int64_t r, float* row) const {
  const int64_t col_b = n_embd_ - 1;
  if (t == "attn_q.weight" || t == "attn_k.weight") {
    const bool q = t == "attn_q.weight";
    const int64_t head = r / hd_, e = r % hd_;
    if (q && head % grp_ != 0) return;
    const int64_t g = q ? head / grp_ : head;
    if (g >= n_off_ || e >= 2 * n_pos_pairs_) return;
    const int64_t p = e / 2, offset = 1 + g;
    const double theta = std::pow(double(rope_base_), -2.0 * double(p) / double(hd_));
    // score ~ cos((j - i) theta - phi): the peak is at j = i - offset with phi = -offset theta
    const double phi = -double(offset) * theta;
    row[col_b] += q ? s_pos_ * float(e % 2 ? std::sin(phi) : std::cos(phi)) : (e % 2 ? 0.0f : s_pos_);
  } else if (t == "attn_v.weight") {
    const int64_t g = r / hd_, e = r % hd_;
    if (g < n_off_) row[e] += 1.0f;
  } else if (t == "attn_output.weight") {
    if (r < m_ || r >= (n_off_ + 1) * m_) return;
    const int64_t g = (r - m_) / hd_;  // B(g+1), written by kv head g
    row[g * grp_ * hd_ + (r - m_) % hd_] += s_o0_;
  }
}

// Layers 1..: every kv head (its first q head) matches c(t[i]) + .. + c(t[i-D+1]) against
// c(t[j-1]) + .. + c(t[j-D]) in its low-frequency pairs, through a projection of its own, and
// votes c(t[j])[0:hd] into C.
void copy_circuit::induction(int layer, const std::string& t, int64_t r, float* row) const {
  if (t == "attn_q.weight" || t == "attn_k.weight") {
    const bool q = t == "attn_q.weight";
    const int64_t head = r / hd_, e = r % hd_;
    if (q && head % grp_ != 0) return;
    const int64_t g = q ? head / grp_ : head;
    if (e < 2 * low_pair_) return;
    const int64_t first = q ? 0 : m_;  // q reads A, B1.., k reads B1, B2..
    const int64_t head_key = (int64_t(layer) * n_kv_ + g) * hd_ + e;
    for (int64_t k = 0; k < n_off_; ++k)
      for (int64_t i = 0; i < m_; ++i) row[first + k * m_ + i] += s_ind_ * code(0xA + uint64_t(k), head_key, i);
  } else if (t == "attn_v.weight") {
    row[r % hd_] += 1.0f;  // every kv head carries c(t[j])[0:hd]
  } else if (t == "attn_output.weight") {
    const int64_t c0 = (n_off_ + 1) * m_;
    if (r < c0 || r >= c0 + hd_) return;
    for (int64_t g = 0; g < n_kv_; ++g) row[g * grp_ * hd_ + (r - c0)] += s_o1_;
  }
}

void copy_circuit::overlay(const std::string& name, int64_t r, float* row, int64_t n_cols) const {
  (void)n_cols;
  if (name == "token_embd.weight") {
    for (int64_t i = 0; i < m_; ++i) row[i] += code(0xC, r, i);
    row[n_embd_ - 1] += beta_;
  } else if (name == "output.weight") {
    for (int64_t e = 0; e < hd_; ++e) row[(n_off_ + 1) * m_ + e] += s_out_ * code(0xC, r, e);
  } else {
    std::string rest;
    const int l = layer_of(name, &rest);
    if (l == 0) layer0(rest, r, row);
    else if (l > 0) induction(l, rest, r, row);
  }
}

}  // namespace agentq::gguf
