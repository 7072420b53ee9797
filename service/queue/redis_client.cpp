// hiredis wrapper: argv commands, reply conversion, reconnect with exponential backoff.
#include "queue/redis_client.h"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace agentq::queue {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

timeval to_timeval(int32_t ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

redis_reply convert(const redisReply* r) {
  redis_reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = redis_reply::kind::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = redis_reply::kind::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = redis_reply::kind::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = redis_reply::kind::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = redis_reply::kind::array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = redis_reply::kind::nil;
  }
  return out;
}

redis_reply io_error(std::string msg) {
  redis_reply r;
  r.type = redis_reply::kind::io_error;
  r.str = std::move(msg);
  return r;
}

}  // namespace

redis_client::redis_client(redis_options options) : options_(std::move(options)) {}

redis_client::~redis_client() {
  if (ctx_) redisFree(ctx_);
}

bool redis_client::ensure_connected() {
  if (ctx_) return true;
  int64_t now = steady_ms();
  if (now < next_attempt_ms_) return false;
  auto back_off = [&] {
    backoff_ms_ = backoff_ms_ == 0 ? options_.backoff_initial_ms : std::min(backoff_ms_ * 2, options_.backoff_max_ms);
    next_attempt_ms_ = now + backoff_ms_;
    stats_.n_io_errors++;
  };
  if (!options_.sentinels.empty()) {
    std::string host, why;
    int32_t port = 0;
    if (!resolve_master(&host, &port, &why)) {
      back_off();
      if (why != last_handshake_error_) spdlog::warn("redis: sentinel: {}", why);
      last_handshake_error_ = why;
      return false;
    }
    if (host != options_.host || port != options_.port)
      spdlog::info("redis: sentinel: master '{}' is at {}:{}", options_.master_name, host, port);
    options_.host = host;
    options_.port = port;
  }
  redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, to_timeval(options_.connect_timeout_ms));
  if (!c || c->err) {
    std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    backoff_ms_ = backoff_ms_ == 0 ? options_.backoff_initial_ms : std::min(backoff_ms_ * 2, options_.backoff_max_ms);
    next_attempt_ms_ = now + backoff_ms_;
    stats_.n_io_errors++;
    spdlog::debug("redis: connect {}:{} failed: {} (retry in {} ms)", options_.host, options_.port, why, backoff_ms_);
    return false;
  }
  redisSetTimeout(c, to_timeval(options_.io_timeout_ms));
  redisEnableKeepAlive(c);
  if (std::string why; !handshake(c, &why) || (!options_.sentinels.empty() && !check_master(c, &why))) {
    redisFree(c);
    back_off();
    // NOTE: a refused AUTH is a configuration error, not a blip: say so at warn, once per kind.
    if (why != last_handshake_error_) spdlog::warn("redis: {}:{}: {}", options_.host, options_.port, why);
    last_handshake_error_ = why;
    return false;
  }
  last_handshake_error_.clear();
  ctx_ = c;
  backoff_ms_ = 0;
  stats_.n_reconnects++;
  return true;
}

bool redis_client::handshake(redisContext* c, std::string* why) {
  auto run = [&](std::vector<std::string> argv, const char* what) {
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (auto& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), args.data(), lens.data()));
    if (!r) {
      *why = std::string(what) + " failed: " + c->errstr;
      return false;
    }
    bool ok = r->type != REDIS_REPLY_ERROR;
    if (!ok) *why = std::string(what) + " refused: " + std::string(r->str, r->len);
    freeReplyObject(r);
    return ok;
  };
  if (!options_.password.empty()) {
    std::vector<std::string> argv = {"AUTH"};
    if (!options_.username.empty()) argv.push_back(options_.username);
    argv.push_back(options_.password);
    if (!run(std::move(argv), options_.username.empty() ? "AUTH" : "AUTH (user)")) return false;
  }
  if (options_.db != 0 && !run({"SELECT", std::to_string(options_.db)}, "SELECT")) return false;
  return true;
}

void redis_client::drop(const std::string& why) {
  spdlog::debug("redis: dropping connection: {}", why);
  stats_.n_io_errors++;
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
  backoff_ms_ = options_.backoff_initial_ms;
  next_attempt_ms_ = steady_ms() + backoff_ms_;
}

redis_reply redis_client::command(const std::vector<std::string>& argv) {
  stats_.n_commands++;
  if (!ensure_connected()) return io_error("redis not connected");
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(argv.size()), args.data(), lens.data()));
  if (!r) {
    std::string why = ctx_->errstr;
    drop(why);  // NOTE: a hiredis context is unusable after any I/O or protocol error
    return io_error(why);
  }
  redis_reply out = convert(r);
  freeReplyObject(r);
  if (out.type == redis_reply::kind::error) {
    stats_.n_errors++;
    on_error_reply(out.str);
  }
  return out;
}

std::vector<redis_reply> redis_client::pipeline(const std::vector<std::vector<std::string>>& commands) {
  std::vector<redis_reply> out;
  stats_.n_commands += static_cast<int64_t>(commands.size());
  if (!ensure_connected()) {
    out.assign(commands.size(), io_error("redis not connected"));
    return out;
  }
  for (auto& argv : commands) {
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (auto& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), args.data(), lens.data());
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) {
      std::string why = ctx_->errstr;
      drop(why);
      while (out.size() < commands.size()) out.push_back(io_error(why));
      return out;
    }
    auto* r = static_cast<redisReply*>(raw);
    out.push_back(convert(r));
    if (out.back().type == redis_reply::kind::error) stats_.n_errors++;
    freeReplyObject(r);
  }
  // NOTE: after every reply is read, so the context is in step until it is dropped.
  for (const auto& r : out)
    if (r.type == redis_reply::kind::error && ctx_) on_error_reply(r.str);
  return out;
}

}  // namespace agentq::queue
