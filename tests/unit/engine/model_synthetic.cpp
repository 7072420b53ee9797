// The forward pass on small synthetic models (llama and qwen2; F16, Q8_0, Q4_K, #26's formats) big
// enough to spread matmuls and attention over the thread pool: logits are bit-identical
// alone, batched and chunked, and with 1 or 4 threads; a qwen2 model's logits agree with
// a naive dequantized reference forward (q/k/v biases, NeoX RoPE, GQA over paged KV).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "kv/kv_store.h"
#include "model/model.h"

using namespace agentq;

namespace {

constexpr int32_t n_embd = 256, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 512, n_vocab = 300, hd = n_embd / n_head;

struct rng64 {
  uint64_t s;
  float next() {  // roughly normal(0, 1): sum of 4 uniforms, centred and scaled
    float acc = 0;
    for (int i = 0; i < 4; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      acc += float(s >> 40) / float(1 << 24);
    }
    return (acc - 2.0f) * 1.7320508f;
  }
};

struct tensor_src {
  std::string name;
  gguf::tensor_type type;
  int64_t n_cols, n_rows;
  std::vector<float> values;  // [n_rows][n_cols]
};

// Writes the model to path; returns every tensor's values as written (dequantized), by name.
std::map<std::string, std::vector<float>> write_model(const std::string& path, const std::string& arch, gguf::tensor_type wt) {
  rng64 r{42};
  std::vector<tensor_src> ts;
  auto add = [&](std::string name, gguf::tensor_type t, int64_t cols, int64_t rows, float fill, float sigma) {
    tensor_src s{std::move(name), t, cols, rows, std::vector<float>(size_t(cols * rows))};
    for (auto& v : s.values) v = fill + sigma * r.next();
    ts.push_back(std::move(s));
  };
  const int64_t n_q = n_head * hd, n_kv = n_head_kv * hd;
  add("token_embd.weight", wt, n_embd, n_vocab, 0, 0.5f);
  for (int32_t l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", gguf::tensor_type::f32, n_embd, 1, 1.0f, 0.1f);
    add(p + "attn_q.weight", wt, n_embd, n_q, 0, 0.06f);
    add(p + "attn_k.weight", wt, n_embd, n_kv, 0, 0.06f);
    add(p + "attn_v.weight", wt, n_embd, n_kv, 0, 0.06f);
    if (arch == "qwen2") {
      add(p + "attn_q.bias", gguf::tensor_type::f32, n_q, 1, 0, 0.1f);
      add(p + "attn_k.bias", gguf::tensor_type::f32, n_kv, 1, 0, 0.1f);
      add(p + "attn_v.bias", gguf::tensor_type::f32, n_kv, 1, 0, 0.1f);
    }
    add(p + "attn_output.weight", wt, n_q, n_embd, 0, 0.06f);
    add(p + "ffn_norm.weight", gguf::tensor_type::f32, n_embd, 1, 1.0f, 0.1f);
    add(p + "ffn_gate.weight", wt, n_embd, n_ff, 0, 0.06f);
    add(p + "ffn_down.weight", wt, n_ff, n_embd, 0, 0.04f);
    add(p + "ffn_up.weight", wt, n_embd, n_ff, 0, 0.06f);
  }
  add("output_norm.weight", gguf::tensor_type::f32, n_embd, 1, 1.0f, 0.1f);
  add("output.weight", wt, n_embd, n_vocab, 0, 0.06f);

  gguf::writer w;
  const std::string a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_u32(a + "context_length", 1024);
  w.set_u32(a + "embedding_length", n_embd);
  w.set_u32(a + "block_count", n_layer);
  w.set_u32(a + "feed_forward_length", n_ff);
  w.set_u32(a + "attention.head_count", n_head);
  w.set_u32(a + "attention.head_count_kv", n_head_kv);
  w.set_f32(a + "rope.freq_base", 10000.0f);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  for (const auto& t : ts) {
    if (t.n_rows == 1) w.add_tensor(t.name, t.type, {t.n_cols});
    else w.add_tensor(t.name, t.type, {t.n_cols, t.n_rows});
  }
  std::string err;
  REQUIRE_MESSAGE(w.open(path, &err), err);
  std::map<std::string, std::vector<float>> values;
  for (const auto& t : ts) {
    const auto kt = kernels::weight_type(uint32_t(t.type));
    const size_t row = kernels::row_bytes(kt, t.n_cols);
    std::vector<uint8_t> data(row * size_t(t.n_rows));
    std::vector<float> back(t.values.size());
    for (int64_t i = 0; i < t.n_rows; ++i) {
      kernels::quantize_row(kt, t.values.data() + i * t.n_cols, data.data() + size_t(i) * row, t.n_cols);
      kernels::dequantize_row(kt, data.data() + size_t(i) * row, back.data() + i * t.n_cols, t.n_cols);
    }
    REQUIRE_MESSAGE(w.write_tensor_data(data.data(), data.size(), &err), err);
    values[t.name] = std::move(back);
  }
  REQUIRE_MESSAGE(w.close(&err), err);
  return values;
}

std::unique_ptr<model> load(const std::string& path, int32_t n_threads) {
  std::string err;
  std::shared_ptr<const gguf::file> f = gguf::file::open(path, &err);
  REQUIRE_MESSAGE(f, err);
  auto m = model::load(f, n_threads, &err);
  REQUIRE_MESSAGE(m, err);
  return m;
}

std::vector<std::vector<token_id>> streams() {
  std::vector<std::vector<token_id>> s;
  for (int i = 0; i < 4; ++i) {
    std::vector<token_id> t;
    for (int j = 0; j < 20 + 13 * i; ++j) t.push_back(token_id((j * 37 + i * 101 + 5) % n_vocab));
    s.push_back(std::move(t));
  }
  return s;
}

// All logits of each stream, prefilled in chunks of `chunk` tokens with all streams in every
// forward call; seqs use interleaved blocks of a shared store. last_only_odd: odd streams ask for
// their chunks' last rows only (as a prefill does; the last layer then runs on fewer rows), and
// only those rows are filled in (the others stay 0).
std::vector<std::vector<float>> run_batched(model& m, const std::vector<std::vector<token_id>>& st, int32_t chunk,
                                            bool last_only_odd = false) {
  constexpr int32_t bs = 16, per_seq = 8;
  const int32_t n_seqs = int32_t(st.size());
  kv_store kv(m.kv_layout_for(bs), per_seq * n_seqs);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seqs));
  for (int32_t s = 0; s < n_seqs; ++s)
    for (int32_t b = 0; b < per_seq; ++b) tables[size_t(s)].push_back(b * n_seqs + s);
  std::vector<std::vector<float>> out(static_cast<size_t>(n_seqs));
  for (int32_t s = 0; s < n_seqs; ++s) out[size_t(s)].resize(st[size_t(s)].size() * n_vocab);
  std::vector<int32_t> done(static_cast<size_t>(n_seqs), 0);
  std::vector<float> buf;
  for (;;) {
    std::vector<batch_seq> batch;
    std::vector<int32_t> who;
    for (int32_t s = 0; s < n_seqs; ++s) {
      const int32_t d = done[size_t(s)], n = std::min<int32_t>(chunk, int32_t(st[size_t(s)].size()) - d);
      if (n <= 0) continue;
      batch.push_back({tables[size_t(s)].data(), d, st[size_t(s)].data() + d, n, !(last_only_odd && s % 2 == 1)});
      who.push_back(s);
    }
    if (batch.empty()) break;
    int32_t rows = 0;
    for (const auto& b : batch) rows += b.all_logits ? b.n_tokens : 1;
    buf.assign(size_t(rows) * n_vocab, 0.0f);
    REQUIRE(m.forward(batch, kv, buf.data()) == rows);
    int32_t r = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const int32_t n_rows = batch[i].all_logits ? batch[i].n_tokens : 1;
      const int32_t pos0 = batch[i].n_past + batch[i].n_tokens - n_rows;
      std::memcpy(out[size_t(who[i])].data() + size_t(pos0) * n_vocab, buf.data() + size_t(r) * n_vocab,
                  size_t(n_rows) * n_vocab * 4);
      r += n_rows;
      done[size_t(who[i])] += batch[i].n_tokens;
    }
  }
  return out;
}

// Naive forward of one stream from dequantized weights (double accumulation); logits of every position.
std::vector<float> reference(std::map<std::string, std::vector<float>>& w, const std::vector<token_id>& toks, bool neox) {
  const int32_t n = int32_t(toks.size()), n_q = n_head * hd, n_kv = n_head_kv * hd;
  std::vector<std::vector<float>> K(n_layer * size_t(n)), V(n_layer * size_t(n));
  std::vector<float> logits;
  auto matvec = [](const std::vector<float>& W, const std::vector<float>& x, int64_t rows) {
    std::vector<float> y(static_cast<size_t>(rows));
    const size_t cols = x.size();
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (size_t c = 0; c < cols; ++c) s += double(W[size_t(r) * cols + c]) * x[c];
      y[size_t(r)] = float(s);
    }
    return y;
  };
  auto norm = [](const std::vector<float>& x, const std::vector<float>& g, float eps) {
    double s = 0;
    for (float v : x) s += double(v) * v;
    const double sc = 1.0 / std::sqrt(s / double(x.size()) + eps);
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = float(x[i] * sc * g[i]);
    return y;
  };
  auto rope = [&](std::vector<float>& v, int32_t heads, int32_t pos) {
    for (int32_t h = 0; h < heads; ++h)
      for (int32_t i = 0; i < hd / 2; ++i) {
        const double th = pos * std::pow(10000.0, -2.0 * i / hd);
        const int32_t a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
        const double x0 = v[size_t(h * hd + a)], x1 = v[size_t(h * hd + b)];
        v[size_t(h * hd + a)] = float(x0 * std::cos(th) - x1 * std::sin(th));
        v[size_t(h * hd + b)] = float(x0 * std::sin(th) + x1 * std::cos(th));
      }
  };
  for (int32_t p = 0; p < n; ++p) {
    std::vector<float> x(w["token_embd.weight"].begin() + toks[size_t(p)] * n_embd,
                         w["token_embd.weight"].begin() + (toks[size_t(p)] + 1) * n_embd);
    for (int32_t l = 0; l < n_layer; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      auto xb = norm(x, w[b + "attn_norm.weight"], 1e-6f);
      auto q = matvec(w[b + "attn_q.weight"], xb, n_q), k = matvec(w[b + "attn_k.weight"], xb, n_kv),
           v = matvec(w[b + "attn_v.weight"], xb, n_kv);
      if (w.count(b + "attn_q.bias")) {
        for (int32_t i = 0; i < n_q; ++i) q[size_t(i)] += w[b + "attn_q.bias"][size_t(i)];
        for (int32_t i = 0; i < n_kv; ++i) k[size_t(i)] += w[b + "attn_k.bias"][size_t(i)];
        for (int32_t i = 0; i < n_kv; ++i) v[size_t(i)] += w[b + "attn_v.bias"][size_t(i)];
      }
      rope(q, n_head, p);
      rope(k, n_head_kv, p);
      K[size_t(l * n + p)] = k;
      V[size_t(l * n + p)] = v;
      std::vector<float> att(size_t(n_q), 0.0f);
      for (int32_t h = 0; h < n_head; ++h) {
        const int32_t kh = h / (n_head / n_head_kv);
        std::vector<double> sc(size_t(p + 1));
        double mx = -1e300, sum = 0;
        for (int32_t t = 0; t <= p; ++t) {
          double s = 0;
          for (int32_t d = 0; d < hd; ++d) s += double(q[size_t(h * hd + d)]) * K[size_t(l * n + t)][size_t(kh * hd + d)];
          sc[size_t(t)] = s / std::sqrt(double(hd));
          mx = std::max(mx, sc[size_t(t)]);
        }
        for (auto& s : sc) sum += (s = std::exp(s - mx));
        for (int32_t t = 0; t <= p; ++t)
          for (int32_t d = 0; d < hd; ++d)
            att[size_t(h * hd + d)] += float(sc[size_t(t)] / sum * V[size_t(l * n + t)][size_t(kh * hd + d)]);
      }
      auto o = matvec(w[b + "attn_output.weight"], att, n_embd);
      for (int32_t i = 0; i < n_embd; ++i) x[size_t(i)] += o[size_t(i)];
      xb = norm(x, w[b + "ffn_norm.weight"], 1e-6f);
      auto g = matvec(w[b + "ffn_gate.weight"], xb, n_ff), u = matvec(w[b + "ffn_up.weight"], xb, n_ff);
      for (int32_t i = 0; i < n_ff; ++i) g[size_t(i)] = float(g[size_t(i)] / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)]);
      auto d = matvec(w[b + "ffn_down.weight"], g, n_embd);
      for (int32_t i = 0; i < n_embd; ++i) x[size_t(i)] += d[size_t(i)];
    }
    auto lg = matvec(w["output.weight"], norm(x, w["output_norm.weight"], 1e-6f), n_vocab);
    logits.insert(logits.end(), lg.begin(), lg.end());
  }
  return logits;
}

}  // namespace

TEST_CASE("synthetic models: batch, chunking and thread count never change logits") {
  const auto dir = std::filesystem::temp_directory_path();
  for (const char* arch : {"llama", "qwen2"}) {
    for (auto wt : {gguf::tensor_type::f16, gguf::tensor_type::q8_0, gguf::tensor_type::q4_k}) {
      CAPTURE(arch);
      CAPTURE(gguf::name_of(wt));
      const std::string path = (dir / ("agentq-test-" + std::string(arch) + "-" + gguf::name_of(wt) + ".gguf")).string();
      write_model(path, arch, wt);
      auto m4 = load(path, 4);
      auto m1 = load(path, 1);
      const auto st = streams();
      // Alone, one token at a time, single-threaded: the baseline.
      std::vector<std::vector<float>> alone;
      for (const auto& s : st) alone.push_back(run_batched(*m1, {s}, 1)[0]);
      for (int32_t chunk : {1000, 1, 5, 16}) {
        CAPTURE(chunk);
        auto got = run_batched(*m4, st, chunk);
        for (size_t i = 0; i < st.size(); ++i) {
          CAPTURE(i);
          CHECK(std::memcmp(got[i].data(), alone[i].data(), got[i].size() * 4) == 0);
        }
        // odd streams' chunks ask for their last rows only: those rows are the same bits
        got = run_batched(*m4, st, chunk, true);
        for (size_t i = 1; i < st.size(); i += 2) {
          CAPTURE(i);
          const int32_t n = int32_t(st[i].size());
          for (int32_t end = std::min(chunk, n);; end = std::min(end + chunk, n)) {  // each chunk's last row
            CAPTURE(end);
            const size_t o = size_t(end - 1) * n_vocab;
            CHECK(std::memcmp(got[i].data() + o, alone[i].data() + o, n_vocab * 4) == 0);
            if (end == n) break;
          }
        }
      }
      std::filesystem::remove(path);
    }
  }
}

// The CPU model repacks Q8_0, Q4_K and Q6_K matrices with a multiple of 8 rows into their
// _x8 layouts at load (here all but the 300-row output). Each matmul sums the same exact
// integers in another float order (1e-5 relative: kernels_matmul), but a rounding flip in a
// later layer's 8-bit activations moves logits by far more, so the check is against the
// naive dequantized forward: the repacked model is as close to it as the file layout
// (AGENTQ_REPACK=0) is.
TEST_CASE("quantized weights repacked at load are as accurate as the file layout") {
  for (auto wt : {gguf::tensor_type::q8_0, gguf::tensor_type::q4_k, gguf::tensor_type::q6_k}) {
    CAPTURE(gguf::name_of(wt));
    const std::string path =
        (std::filesystem::temp_directory_path() / ("agentq-test-repack-" + std::string(gguf::name_of(wt)) + ".gguf")).string();
    auto w = write_model(path, "llama", wt);
    const auto st = streams();
    const auto want = reference(w, st[1], false);
    auto repacked = run_batched(*load(path, 2), {st[1]}, 5)[0];
    setenv("AGENTQ_REPACK", "0", 1);
    auto file_layout = run_batched(*load(path, 2), {st[1]}, 5)[0];
    unsetenv("AGENTQ_REPACK");
    REQUIRE(repacked.size() == want.size());
    REQUIRE(file_layout.size() == want.size());
    double err_x8 = 0, err_file = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err_x8 = std::max(err_x8, double(std::fabs(repacked[i] - want[i])));
      err_file = std::max(err_file, double(std::fabs(file_layout[i] - want[i])));
      scale = std::max(scale, double(std::fabs(want[i])));
    }
    MESSAGE(std::string(gguf::name_of(wt)), ": largest logit error vs the dequantized reference: repacked ", err_x8,
            ", file layout ", err_file, " (largest logit ", scale, ")");
    CHECK(err_x8 <= 1.5 * err_file + 1e-3 * scale);
    const auto kt = kernels::weight_type(uint32_t(wt));
    if (kernels::preferred_layout(kt, 8, 256) != kt)
      CHECK_MESSAGE(std::memcmp(repacked.data(), file_layout.data(), repacked.size() * 4) != 0,
                    "the repacked layout was not used");
    std::filesystem::remove(path);
  }
}

// The formats of #26 (Q4_0, Q4_1, Q5_0, Q5_1, Q5_K, MXFP4, IQ4_NL, IQ4_XS, Q2_K, Q3_K) as whole models: the forward pass (8-bit
// activations against the generic / AVX2 dots) stays close to the naive float forward over
// the same dequantized weights, and batching never changes a logit.
TEST_CASE("models of every #26 format run close to their dequantized reference") {
  for (auto wt : {gguf::tensor_type::q4_0, gguf::tensor_type::q4_1, gguf::tensor_type::q5_0, gguf::tensor_type::q5_1,
                  gguf::tensor_type::q5_k, gguf::tensor_type::mxfp4, gguf::tensor_type::iq4_nl,
                  gguf::tensor_type::iq4_xs, gguf::tensor_type::q2_k, gguf::tensor_type::q3_k}) {
    CAPTURE(gguf::name_of(wt));
    const std::string path =
        (std::filesystem::temp_directory_path() / ("agentq-test-fmt-" + std::string(gguf::name_of(wt)) + ".gguf")).string();
    auto w = write_model(path, "qwen2", wt);
    const auto st = streams();
    const auto want = reference(w, st[1], true);
    auto m = load(path, 2);
    auto got = run_batched(*m, {st[1]}, 5)[0];
    auto batched = run_batched(*m, {st[0], st[1], st[2]}, 7)[1];
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), batched.data(), got.size() * 4) == 0);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, double(std::fabs(got[i] - want[i])));
      scale = std::max(scale, double(std::fabs(want[i])));
    }
    MESSAGE(std::string(gguf::name_of(wt)), ": largest logit error vs the dequantized reference ", worst,
            " (largest logit ", scale, ")");
    // NOTE: the error is the 8-bit activations' (~0.4% rms per element, ~2% of the largest
    // logit here), the same as Q8_0/Q4_K/Q6_K's in the test above (0.05-0.08 of ~4.2).
    CHECK(worst <= 3e-2 * std::max(1.0, scale));
    std::filesystem::remove(path);
  }
}

// Q3_K's repacked layout (q3_k_x8) keeps dot_q3_k_scalar's float steps: a Q3_K model gives the
// file layout's logits bit for bit, repacked or not (docs/cpu_decode.md).
TEST_CASE("a Q3_K model repacked at load gives the file layout's logits, bit for bit") {
  const std::string path = (std::filesystem::temp_directory_path() / "agentq-test-repack-q3_k.gguf").string();
  write_model(path, "llama", gguf::tensor_type::q3_k);
  const auto st = streams();
  auto repacked = run_batched(*load(path, 2), {st[0], st[1]}, 5);
  setenv("AGENTQ_REPACK", "0", 1);
  auto file_layout = run_batched(*load(path, 2), {st[0], st[1]}, 5);
  unsetenv("AGENTQ_REPACK");
  for (size_t i = 0; i < repacked.size(); ++i) {
    REQUIRE(repacked[i].size() == file_layout[i].size());
    CHECK(std::memcmp(repacked[i].data(), file_layout[i].data(), repacked[i].size() * 4) == 0);
  }
  std::filesystem::remove(path);
}

TEST_CASE("qwen2 and llama logits match a naive reference forward") {
  const auto dir = std::filesystem::temp_directory_path();
  for (const char* arch : {"llama", "qwen2"}) {
    CAPTURE(arch);
    const std::string path = (dir / ("agentq-test-ref-" + std::string(arch) + ".gguf")).string();
    auto w = write_model(path, arch, gguf::tensor_type::f16);
    auto m = load(path, 2);
    const auto st = streams();
    auto got = run_batched(*m, {st[1]}, 7)[0];
    auto want = reference(w, st[1], std::string(arch) == "qwen2");
    REQUIRE(got.size() == want.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, double(std::fabs(got[i] - want[i])));
      scale = std::max(scale, double(std::fabs(want[i])));
    }
    MESSAGE(std::string(arch), ": largest logit difference ", worst, " (largest logit ", scale, ")");
    CHECK(worst <= 1e-3 * std::max(1.0, scale));
    std::filesystem::remove(path);
  }
}

TEST_CASE("an unsupported weight type is refused at load, naming the type and the tensor") {
  const std::string path = (std::filesystem::temp_directory_path() / "agentq-test-iq2_xxs.gguf").string();
  write_model(path, "llama", gguf::tensor_type::q8_0);
  // Rewrite the file with blk.1.ffn_up.weight as IQ2_XXS (same shape, zero bytes).
  std::string err;
  auto src = gguf::file::open(path, &err);
  REQUIRE_MESSAGE(src, err);
  gguf::writer w;
  for (const auto& [key, val] : src->metadata()) w.set_value(key, val);
  for (const auto& t : src->tensors())
    w.add_tensor(t.name, t.name == "blk.1.ffn_up.weight" ? gguf::tensor_type::iq2_xxs : t.type, t.dims);
  const std::string bad = path + ".bad";
  REQUIRE_MESSAGE(w.open(bad, &err), err);
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    std::vector<uint8_t> data(w.tensor_bytes(i), 0);
    if (src->tensors()[i].n_bytes == data.size()) std::memcpy(data.data(), src->tensors()[i].data, data.size());
    REQUIRE_MESSAGE(w.write_tensor_data(data.data(), data.size(), &err), err);
  }
  REQUIRE_MESSAGE(w.close(&err), err);
  std::shared_ptr<const gguf::file> f = gguf::file::open(bad, &err);
  REQUIRE_MESSAGE(f, err);
  err.clear();
  CHECK_FALSE(model::load(f, 1, &err));
  CHECK_MESSAGE(err.find("IQ2_XXS") != std::string::npos, err);
  CHECK_MESSAGE(err.find("blk.1.ffn_up.weight") != std::string::npos, err);
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}
