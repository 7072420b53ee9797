// What the API needs to know about the loaded models: names, context sizes and the
// engine's up-front request check. The daemon backs it with engines, model headers (--role api) and
// the fleet's adverts (fleet_catalog.h); tests with fakes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <agentq/engine.h>
#include <agentq/model_header.h>

namespace agentq::api {

struct model_info {
  std::string name;     // file stem
  std::string arch;
  int32_t n_ctx = 0;    // tokens
  bool ready = true;    // loaded and not in a failed state
  // Prompt format (model_desc::chat_family): detected or set with --chat-family;
  // "unknown" when the model's chat template matches no family (tool jobs refused).
  std::string chat_family = "plain";
  // Where the API knows it from (#28): "local" (its own --model: an engine, or the header only
  // with --role api) or "fleet" (a worker's advert, for --model-ttl-h after last_seen_ms).
  std::string source = "local";
  int64_t last_seen_ms = 0;  // fleet: when a live worker last advertised it (unix ms)
};

class model_catalog {
 public:
  virtual ~model_catalog() = default;
  virtual std::vector<model_info> list() const = 0;
  // nullopt if the request fits the model (schemas compile, prompt fits), else the engine's message.
  virtual std::optional<std::string> validate(const std::string& model, const turn_request& request) const = 0;
  // The same, where the catalog holds no KV pool, plus the KV-room check against the pools the
  // fleet advertised for the model (#28: model_header::validate). An engine's own pool decides
  // for itself, so by default the rooms are not used.
  virtual std::optional<std::string> validate_with_rooms(const std::string& model, const turn_request& request,
                                                         std::span<const kv_room> rooms) const {
    (void)rooms;
    return validate(model, request);
  }
};

// A catalog over loaded engines (name = model().name).
class engine_catalog : public model_catalog {
 public:
  void add(std::shared_ptr<engine> e) { engines_.push_back(std::move(e)); }
  std::vector<model_info> list() const override;
  std::optional<std::string> validate(const std::string& model, const turn_request& request) const override;
  std::shared_ptr<engine> find(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<engine>> engines_;
};

// A catalog over model headers (--role api: tokenizer, template and hyper-parameters only; no
// weights, no KV pool). validate() is engine::validate but for the KV-room check.
class header_catalog : public model_catalog {
 public:
  void add(std::shared_ptr<const model_header> h) { headers_.push_back(std::move(h)); }
  std::vector<model_info> list() const override;
  std::optional<std::string> validate(const std::string& model, const turn_request& request) const override;
  std::optional<std::string> validate_with_rooms(const std::string& model, const turn_request& request,
                                                 std::span<const kv_room> rooms) const override;

 private:
  std::vector<std::shared_ptr<const model_header>> headers_;
};

}  // namespace agentq::api
