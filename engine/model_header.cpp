// model_header (engine.h): a control plane's view of a model, built from its GGUF header alone
// (gguf::file::open_header / parse_header): tokenizer, chat family, hyper-parameters.
#include <cstdio>
#include <filesystem>

#include "agentq/model_header.h"
#include "chat/chat.h"
#include "gguf/reader.h"
#include "kv/spill.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"
#include "turn_check.h"

namespace agentq {

namespace {

class header_impl final : public model_header {
 public:
  const model_desc& model() const override { return desc_; }
  const std::string& bytes() const override { return bytes_; }
  std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const override {
    return tok_->encode(text, add_special, parse_special);
  }
  std::string render(const std::vector<chat_message>& messages, const std::vector<tool_def>& tools) const override {
    return chat::render(family_, messages, tools, true);
  }
  std::optional<std::string> validate(const turn_request& r) const override {
    size_t n = 0;  // asked for, so an upper bound may do (check_turn)
    return check_turn(r, family_, *tok_, desc_.n_ctx, &n);
  }
  std::optional<std::string> validate(const turn_request& r, std::span<const kv_room> rooms) const override {
    size_t n = 0;
    const auto all_fit = [&](size_t b) {
      for (const auto& room : rooms)
        if (!room.fits(desc_.n_layer, int64_t(b))) return false;
      return true;
    };
    if (auto e = check_turn(r, family_, *tok_, desc_.n_ctx, &n, nullptr, all_fit)) return e;
    if (!all_fit(n)) return kv_room_message(n);
    return std::nullopt;
  }

  // Fill from an opened header; nullptr + *error (engine::load's wording) on failure.
  static std::unique_ptr<model_header> build(const gguf::file& f, const std::string& name, const std::string& where,
                                             const std::string& chat_family, std::string* error) {
    auto fail = [&](const std::string& e) -> std::unique_ptr<model_header> {
      if (error) *error = e;
      return nullptr;
    };
    auto arch = f.get_string("general.architecture");
    if (!arch) return fail("cannot load model '" + where + "': missing general.architecture");
    if (!find_architecture(*arch))
      return fail("cannot load model '" + where + "': unsupported architecture '" + std::string(*arch) +
                  "' (supported: " + architecture_names() + ")");
    std::unique_ptr<header_impl> h(new header_impl());
    std::string err;
    h->tok_ = tokenizer::load(f, &err);
    if (!h->tok_) return fail("cannot load the tokenizer of '" + where + "': " + err);
    model_desc& d = h->desc_;
    d.name = name;
    d.arch = std::string(*arch);
    const std::string p = d.arch + ".";
    // NOTE: as model_loader::common_hparams (context_length defaults to 2048 there too).
    d.n_ctx = int32_t(f.get_int(p + "context_length").value_or(2048));
    d.n_embd = int32_t(f.get_int(p + "embedding_length").value_or(0));
    d.n_layer = int32_t(f.get_int(p + "block_count").value_or(0));
    d.n_head = int32_t(f.get_int(p + "attention.head_count").value_or(0));
    d.n_head_kv = int32_t(f.get_int(p + "attention.head_count_kv").value_or(d.n_head));
    if (d.n_ctx <= 0) return fail("cannot load model '" + where + "': invalid " + p + "context_length");
    const gguf::tensor_info* emb = f.find_tensor("token_embd.weight");
    d.n_vocab = emb && emb->dims.size() >= 2 ? int32_t(emb->dims[1]) : h->tok_->n_vocab();
    d.bos = h->tok_->bos();
    d.eos = h->tok_->eos();
    d.eot = h->tok_->eot();
    d.device = "none";
    if (!chat_family.empty()) {
      auto fam = chat::family_from_name(chat_family);
      if (!fam) return fail("unknown chat_family '" + chat_family + "'");
      h->family_ = *fam;
      d.chat_family = chat::to_string(*fam);
    } else {
      auto fam = chat::detect_family(f.get_string("tokenizer.chat_template").value_or(""));
      h->family_ = fam.value_or(chat::template_family::plain);
      d.chat_family = fam ? chat::to_string(*fam) : chat::unknown_family_name;
    }
    h->bytes_ = std::string(f.header_data());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(checksum64(h->bytes_.data(), h->bytes_.size())));
    d.digest = hex;
    return h;
  }

 private:
  model_desc desc_;
  std::string bytes_;
  std::unique_ptr<tokenizer> tok_;
  chat::template_family family_ = chat::template_family::plain;
};

}  // namespace

std::unique_ptr<model_header> model_header::open(const std::string& path, const std::string& chat_family,
                                                 std::string* error) {
  std::string err;
  auto f = gguf::file::open_header(path, &err);
  if (!f) {
    if (error) *error = "cannot load model '" + path + "': " + err;
    return nullptr;
  }
  return header_impl::build(*f, std::filesystem::path(path).stem().string(), path, chat_family, error);
}

std::unique_ptr<model_header> model_header::parse(std::string_view bytes, const std::string& name,
                                                  const std::string& chat_family, std::string* error) {
  std::string err;
  auto f = gguf::file::parse_header(bytes, &err);
  if (!f) {
    if (error) *error = "model '" + name + "': " + err;
    return nullptr;
  }
  return header_impl::build(*f, name, name, chat_family, error);
}

}  // namespace agentq
