// Redis Sentinel for redis_client (hiredis 0.14 has none): ask each sentinel in turn for the
// master's address (SENTINEL get-master-addr-by-name), check the server there says ROLE master,
// and drop the connection on replies that mean it is not the master any more, so the next
// command resolves again. See redis_client.h (redis_options::sentinels).
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <charconv>

#include "queue/redis_client.h"

namespace agentq::queue {

namespace {

timeval ms_timeval(int32_t ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

redisReply* run(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  return static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), args.data(), lens.data()));
}

bool starts_with(const char* s, size_t n, std::string_view p) { return n >= p.size() && std::string_view(s, p.size()) == p; }

}  // namespace

bool redis_client::resolve_master(std::string* host, int32_t* port, std::string* why) {
  std::string errors;
  const size_t n = options_.sentinels.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t idx = (sentinel_idx_ + k) % n;
    const auto& [s_host, s_port] = options_.sentinels[idx];
    const std::string where = s_host + ":" + std::to_string(s_port);
    redisContext* c = redisConnectWithTimeout(s_host.c_str(), s_port, ms_timeval(options_.connect_timeout_ms));
    if (!c || c->err) {
      errors += (errors.empty() ? "" : "; ") + where + ": " + (c ? c->errstr : "out of memory");
      if (c) redisFree(c);
      continue;
    }
    redisSetTimeout(c, ms_timeval(options_.connect_timeout_ms));
    const std::vector<std::string> ask = {"SENTINEL", "get-master-addr-by-name", options_.master_name};
    redisReply* r = run(c, ask);
    // NOTE: a sentinel with requirepass: the URL's credentials, as most deployments share them.
    if (r && r->type == REDIS_REPLY_ERROR && starts_with(r->str, r->len, "NOAUTH") && !options_.password.empty()) {
      freeReplyObject(r);
      std::vector<std::string> auth = {"AUTH"};
      if (!options_.username.empty()) auth.push_back(options_.username);
      auth.push_back(options_.password);
      if (redisReply* a = run(c, auth)) freeReplyObject(a);
      r = run(c, ask);
    }
    std::string got_host;
    int32_t got_port = 0;
    if (!r) {
      errors += (errors.empty() ? "" : "; ") + where + ": " + c->errstr;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
               r->element[1]->type == REDIS_REPLY_STRING) {
      got_host.assign(r->element[0]->str, r->element[0]->len);
      const char* p = r->element[1]->str;
      auto [end, ec] = std::from_chars(p, p + r->element[1]->len, got_port);
      if (ec != std::errc() || end != p + r->element[1]->len || got_port <= 0 || got_port > 65535) got_host.clear();
      if (got_host.empty()) errors += (errors.empty() ? "" : "; ") + where + ": a malformed address";
    } else if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
      errors += (errors.empty() ? "" : "; ") + where + ": does not know master '" + options_.master_name + "'";
    } else {
      errors += (errors.empty() ? "" : "; ") + where + ": " +
                (r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string("an unexpected reply"));
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    if (!got_host.empty()) {
      sentinel_idx_ = idx;
      *host = got_host;
      *port = got_port;
      return true;
    }
  }
  *why = "no sentinel gave master '" + options_.master_name + "': " + errors;
  return false;
}

bool redis_client::check_master(redisContext* c, std::string* why) {
  redisReply* r = run(c, {"ROLE"});
  if (!r) {
    *why = std::string("ROLE failed: ") + c->errstr;
    return false;
  }
  bool ok = r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING &&
            std::string_view(r->element[0]->str, r->element[0]->len) == "master";
  if (!ok)
    *why = options_.host + ":" + std::to_string(options_.port) + " is not the master (ROLE " +
           (r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING
                ? std::string(r->element[0]->str, r->element[0]->len)
                : std::string("?")) +
           "); the sentinels have not failed over yet";
  freeReplyObject(r);
  return ok;
}

void redis_client::on_error_reply(const std::string& err) {
  if (options_.sentinels.empty() || !ctx_) return;
  for (std::string_view p : {"READONLY", "UNBLOCKED", "MASTERDOWN", "LOADING"})
    if (err.find(p) != std::string::npos) {  // also inside a script's error ("... -READONLY You can't ...")
      spdlog::info("redis: {}:{} answered {}: resolving the master again", options_.host, options_.port,
                   err.substr(0, err.find(' ')));
      drop(err);
      // NOTE: no backoff for this one: the sentinels usually know the new master already.
      next_attempt_ms_ = 0;
      return;
    }
}

}  // namespace agentq::queue
