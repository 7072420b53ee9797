// agentq engine — a model without its weights, for a control plane that only validates
// requests (docs/deploy.md): the tokenizer, chat template and hyper-parameters from the GGUF
// header. No backend, no KV pool: the tensor data is never mapped or read.
// NOTE: beside engine.h rather than in it, so the engine's sources do not depend on it.
#pragma once

#include <span>

#include "agentq/engine.h"

namespace agentq {

class model_header {
 public:
  // Read path's header (metadata + tensor table; a split model's first file only). chat_family
  // as engine_config::chat_family ("" = detect). nullptr with *error (as engine::load's) on failure.
  static std::unique_ptr<model_header> open(const std::string& path, const std::string& chat_family,
                                            std::string* error);
  // From header bytes another process read (bytes()), e.g. a worker's advert; name = the model's name.
  static std::unique_ptr<model_header> parse(std::string_view bytes, const std::string& name,
                                             const std::string& chat_family, std::string* error);
  virtual ~model_header() = default;

  // name, arch, chat_family, n_vocab, n_ctx, n_embd, n_layer, n_head(_kv), bos/eos/eot; digest
  // identifies the header (not the weights); device "none"; kv_capacity_tokens 0.
  virtual const model_desc& model() const = 0;
  // The header's bytes: what parse() takes.
  virtual const std::string& bytes() const = 0;
  virtual std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const = 0;
  virtual std::string render(const std::vector<chat_message>& messages, const std::vector<tool_def>& tools) const = 0;
  // engine::validate's checks, the same messages, but the KV room one (a pool is a worker's).
  virtual std::optional<std::string> validate(const turn_request& request) const = 0;
  // The same plus the KV-room check against the pools the fleet advertised for this model (#28):
  // refused, with engine::validate's message, unless the prompt fits every one of rooms (the
  // header's n_layer with each room); no room = not checked.
  virtual std::optional<std::string> validate(const turn_request& request, std::span<const kv_room> rooms) const = 0;
};

}  // namespace agentq
