// agentqd configuration parsing (see config.h).
#include "daemon/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace agentq::daemon {

using json = nlohmann::json;

const char* usage() {
  return R"(usage: agentqd [options]
  --role all|api|worker        all-in-one (default): API + worker + webhook sender; api: the control plane
                               (validates with model headers only); worker: runs jobs
  --listen HOST:PORT           API address (default 127.0.0.1:8080)
  --tls-cert FILE --tls-key FILE  serve the API over HTTPS (PEM certificate chain and its private key)
  --data-dir DIR               SQLite db, embedded redis AOF, KV spill, logs (default ./agentq-data)
  --redis URL                  redis://[[user]:password@]host[:port][/db] (AUTH, SELECT), or through Redis
                               Sentinel: sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[/db]
                               (asks each sentinel for MASTER's address, checks ROLE, re-resolves after a
                               failover); absent = start an embedded redis-server; prefer AGENTQ_REDIS to keep
                               the password out of ps
  --model PATH                 GGUF model (repeatable; name = file stem); a worker serves every model it loads;
                               --role api reads only its header (tokenizer, chat template, hyper-parameters):
                               no weights, no KV pool (the file `agentq-engine header` writes is enough)
  --model-ttl-h H              a model only workers load (their adverts) stays known to the API H hours after
                               one last advertised it: its jobs are accepted and wait while none serves it
                               (default 24; 0 = only while one does)
  --device cpu|cuda|cuda:N     where the engines run (default cpu); a CUDA device that is not there fails start-up
  --chat-family NAME           prompt format of the --model before it (chatml, qwen3, hermes, llama3, mistral,
                               phi3, smollm3, gemma, deepseek-r1, harmony, plain); before any --model: the default for all
                               models; default: detected from the model's chat template ("unknown" when it matches
                               no family: tool jobs refused)
  --draft-model PATH           a draft model for the --model before it (same vocabulary, checked at load): it
                               proposes tokens the model verifies (docs/speculative.md)
  --spec on|off, --no-spec     speculative decoding (prompt lookup, Predicted Outputs, draft models; default on):
                               the output is the same either way, only its speed differs
  --allow-addresses CIDRS      comma-separated CIDRs exempt from the SSRF guard (e.g. 127.0.0.0/8)
  --admin-key KEY              make sure this admin key exists (else one is printed on first run)
  --config FILE                JSON file with any of: role, listen, data_dir, redis, models (paths, or
                               {"path": P, "chat_family": NAME, "draft_model": P}),
                               allow_addresses, admin_key, http_threads, max_connections, max_body_bytes,
                               rate_limit, rate_burst, webhook_schedule_ms, webhook_timeout_ms, max_jobs,
                               kv_budget_mb, kv_type, chat_family, log_level, log_format, metrics_token,
                               retention_days, shutdown_spill_s, spill_after_s, spill_budget_mb,
                               response_kv_ttl_s, tls_cert, tls_key, worker_id
                               (and every flag below by name)
  --worker-id ID               this worker's stable name (A-Z a-z 0-9 . _ -, at most 64); default: derived from
                               the host name and the data directory, kept in DATA_DIR/worker-id across restarts
  --http-threads N             HTTP io threads (default 0 = one per two cores, 2 to 8): they read requests, run the
                               handlers that never block (submits, reads) and write every answer
  --http-blocking-threads N    threads for the handlers that may block (writes that wait for their commit, the
                               worker protocol, files, batches; default 16)
  --rate-limit RPS  --rate-burst N  --kv-budget-mb N
  --batch-end-linger-ms MS     a batch-class job's end waits up to MS for others to share its commit and ack
                               round trip (default 20; 0 = each job alone)
  --kv-type f16|f32            element type of the stored K/V (default: f16 on cpu, f32 on cuda)
  --engine-threads N           CPU threads per engine (default 0 = one per core, split evenly between the models
                               a worker serves; a model under 4 MiB of weights alone: one thread)
  --engine-replicas N          data-parallel copies of each model, each with its own loop thread and a 1/N share
                               of the KV budget; a job's turns stay on one (default 1; 0 = auto: one per core, 2 at
                               most, for a model under 4 MiB on the CPU with --engine-threads 0; else 1).
                               With --max-jobs 0, the slots below each: more batch jobs/s on a busy small host,
                               but interactive jobs wait longer for a place during a batch (docs/queue_perf.md s. 23)
  --max-jobs N                 jobs a model's worker holds at once (default 0 = 128 per engine replica: twice the
                               sequences a replica runs a step, so its queue stays fed through a claim's commit)
  --max-batch-jobs N           of those --max-jobs slots, Batch-file (batch-class) jobs hold at most N; the rest
                               stay free for high, normal and low jobs, which then find a slot at once during a
                               batch (default 0 = 48 per engine replica with --max-jobs 0, else 3/4 of --max-jobs;
                               N >= --max-jobs = no reserve)
  --worker-nice N              nice increment (0..19, default 10) of the threads that run jobs (engine loop
                               and pool, the worker's job threads; its dispatcher half of it): on a busy
                               host the HTTP threads and the store's writer get the CPUs first, so a submit
                               does not wait behind a model step (docs/queue_perf.md, sessions 21, 36); 0 = off
  --shutdown-spill-s S         on SIGTERM / worker drain, write resident KV to disk for S s at most (default 5)
  --spill-after-s S            a requires_action wait's KV is also written to disk after S s (default 5; -1 = never)
  --spill-budget-mb N          spill files per model at most; the latest-resuming are evicted (default 4096; 0 = no limit)
  --kv-idle-ttl-s S (60)  --kv-pin-max-wait-s S (30)  --kv-pin-relaxed-wait-s S (300)
  --kv-spill-min-tokens N (64)  --client-tool-park-s S (300)   KV residency timings (docs/kv_and_batching.md)
  --response-kv-ttl-s S        a stored OpenAI response keeps its KV parked this long for previous_response_id
                               (default 600; 0 = released when it ends; docs/openai.md)
  --webhook-schedule MS,MS,..  retry delays after each failed delivery (default 5s,5m,30m,2h,5h,10h,10h)
  --webhook-timeout-ms MS  --log-level trace|debug|info|warn|error  --port-file FILE
  --log-format text|json       log lines as text (default) or one JSON object each (job_id field)
  --metrics-token TOKEN        GET /metrics needs "Authorization: Bearer TOKEN" (default: open)
  --lease-ms MS (30000)  --heartbeat-ms MS (2000)  --reclaim-idle-ms MS (30000)
  --reclaim-interval-ms MS (5000)  --max-deliveries N (5: then dead-lettered)
  --retention-days D           finished jobs are deleted D days after they finish (default 30; 0 = never)
  --max-file-bytes N           largest POST /v1/files upload, streamed to disk (default 209715200 = 200 MiB)
  --max-queue-depth N          queued jobs in all before submits get 429 queue_full + Retry-After (default 0 = none)
  --max-queue-depth-per-tenant N   the same bound for one tenant's queued jobs (default 0 = none)
  --tenant-tokens-per-day N    a tenant's input + output tokens per UTC day (finished jobs, as GET /v1/usage
                               counts them); past it submits get 429 insufficient_quota + Retry-After (default 0 = none)
  --tenant-max-running N       a tenant's jobs running at once, across all workers; more are accepted and wait
                               queued (a "waiting" event says why) until one finishes (default 0 = none). Give
                               every agentqd that opens the store the same N (claims are checked where applied)
remote workers (docs/deploy.md "Remote workers"):
  --remote URL                 worker: every read and write of its jobs goes to the control plane at URL
                               (http[s]://host:port); opens no database file (DATA_DIR keeps kv/, worker-id, the log);
                               needs --role worker, --redis and --control-plane-token
  --control-plane-token T      worker (--remote): the worker token it presents (AGENTQ_CONTROL_PLANE_TOKEN)
  --worker-token T             control plane (--role api|all): accept remote workers presenting T on
                               POST /v1/worker/messages (AGENTQ_WORKER_TOKEN); absent = no remote workers
  --worker-tokens-file FILE    control plane: per-worker tokens, "WORKER_ID TOKEN" lines; a token acts for its
                               own worker id only; re-read when the file changes and on SIGHUP (remove a line
                               to revoke); with or instead of --worker-token (docs/deploy.md)
  --protocol-version N         worker-message protocol version spoken (default 3; a control plane accepts N-1..N+1)
subcommand: agentqd backup --data-dir DIR --to FILE   online, consistent copy of the job store
environment: AGENTQ_ROLE AGENTQ_LISTEN AGENTQ_DATA_DIR AGENTQ_REDIS AGENTQ_MODEL AGENTQ_ALLOW_ADDRESSES
             AGENTQ_ADMIN_KEY AGENTQ_LOG_LEVEL AGENTQ_LOG_FORMAT AGENTQ_METRICS_TOKEN AGENTQ_TLS_CERT AGENTQ_TLS_KEY
             AGENTQ_WORKER_ID AGENTQ_REMOTE AGENTQ_CONTROL_PLANE_TOKEN AGENTQ_WORKER_TOKEN
)";
}

namespace {

std::optional<enum role> parse_role(const std::string& s) {
  if (s == "all") return role::all;
  if (s == "api") return role::api;
  if (s == "worker") return role::worker;
  return std::nullopt;
}

std::vector<int64_t> parse_ms_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t idx = 0;
    long long v = std::stoll(item, &idx);
    if (idx != item.size() || v < 0) throw std::invalid_argument("bad delay '" + item + "'");
    out.push_back(v);
  }
  return out;
}

// A duration in seconds, at least min_s (-1 allowed only where min_s is -1: "never").
double parse_seconds(const std::string& name, const std::string& v, double min_s) {
  size_t idx = 0;
  double d = 0;
  try {
    d = std::stod(v, &idx);
  } catch (const std::exception&) {
    idx = 0;
  }
  if (idx == 0 || idx != v.size() || !(d >= min_s) || d > 1e9)
    throw std::invalid_argument("--" + name + " must be a number of seconds >= " + (min_s < 0 ? "-1" : "0"));
  return d;
}

// Set one option by name from a string (flags and environment share this).
void set_option(config& c, const std::string& name, const std::string& v) {
  if (name == "role") {
    auto r = parse_role(v);
    if (!r) throw std::invalid_argument("--role must be all, api or worker");
    c.role = *r;
  } else if (name == "listen") c.listen = v;
  else if (name == "data-dir") c.data_dir = v;
  else if (name == "redis") c.redis = v;
  else if (name == "model") c.models.push_back(v);
  else if (name == "allow-addresses") c.allow_addresses = v;
  else if (name == "admin-key") c.admin_key = v;
  else if (name == "http-threads") {
    c.http_threads = std::stoi(v);
    if (c.http_threads < 0) throw std::invalid_argument("--http-threads must be >= 0 (0 = one per two cores)");
  } else if (name == "http-blocking-threads") {
    c.http_blocking_threads = std::stoi(v);
    if (c.http_blocking_threads < 1) throw std::invalid_argument("--http-blocking-threads must be >= 1");
  } else if (name == "max-connections") c.max_connections = std::stoi(v);
  else if (name == "max-body-bytes") c.max_body_bytes = std::stoll(v);
  else if (name == "max-file-bytes") {
    c.max_file_bytes = std::stoll(v);
    if (c.max_file_bytes < 1) throw std::invalid_argument("--max-file-bytes must be >= 1");
  } else if (name == "max-queue-depth") {
    c.max_queue_depth = std::stoll(v);
    if (c.max_queue_depth < 0) throw std::invalid_argument("--max-queue-depth must be >= 0");
  } else if (name == "max-queue-depth-per-tenant") {
    c.max_queue_depth_per_tenant = std::stoll(v);
    if (c.max_queue_depth_per_tenant < 0) throw std::invalid_argument("--max-queue-depth-per-tenant must be >= 0");
  } else if (name == "tenant-tokens-per-day") {
    c.tenant_tokens_per_day = std::stoll(v);
    if (c.tenant_tokens_per_day < 0) throw std::invalid_argument("--tenant-tokens-per-day must be >= 0");
  } else if (name == "tenant-max-running") {
    c.tenant_max_running = std::stoll(v);
    if (c.tenant_max_running < 0) throw std::invalid_argument("--tenant-max-running must be >= 0");
  }
  else if (name == "rate-limit") c.rate_limit = std::stod(v);
  else if (name == "rate-burst") c.rate_burst = std::stod(v);
  else if (name == "webhook-schedule") c.webhook_schedule_ms = parse_ms_list(v);
  else if (name == "webhook-timeout-ms") c.webhook_timeout_ms = std::stoll(v);
  else if (name == "max-jobs") {
    c.max_jobs = std::stoi(v);
    if (c.max_jobs < 0) throw std::invalid_argument("--max-jobs must be >= 0 (0 = 128 per engine replica)");
  }
  else if (name == "max-batch-jobs") {
    c.max_batch_jobs = std::stoi(v);
    if (c.max_batch_jobs < 0) throw std::invalid_argument("--max-batch-jobs must be >= 0 (0 = the default share)");
  }
  else if (name == "batch-end-linger-ms") c.batch_end_linger_ms = std::stod(v);
  else if (name == "worker-id") c.worker_id = v;  // checked by worker_identity::acquire
  else if (name == "kv-budget-mb") c.kv_budget_mb = std::stoll(v);
  else if (name == "kv-type") {
    if (v != "f16" && v != "f32") throw std::invalid_argument("--kv-type must be f16 or f32");
    c.kv_type = v;
  }
  else if (name == "engine-threads") c.engine_threads = std::stoi(v);
  else if (name == "engine-replicas") {
    c.engine_replicas = std::stoi(v);
    if (c.engine_replicas < 0 || c.engine_replicas > 64) throw std::invalid_argument("--engine-replicas must be 0..64");
  }
  else if (name == "worker-nice") {
    c.worker_nice = std::stoi(v);
    if (c.worker_nice < 0 || c.worker_nice > 19) throw std::invalid_argument("--worker-nice must be 0..19");
  }
  else if (name == "spec") {
    if (v == "on" || v == "true") c.spec = true;
    else if (v == "off" || v == "false") c.spec = false;
    else throw std::invalid_argument("--spec must be on or off");
  }
  else if (name == "shutdown-spill-s") c.shutdown_spill_s = parse_seconds(name, v, 0);
  else if (name == "spill-after-s") c.spill_after_s = parse_seconds(name, v, -1);
  else if (name == "spill-budget-mb") {
    c.spill_budget_mb = std::stoll(v);
    if (c.spill_budget_mb < 0) throw std::invalid_argument("--spill-budget-mb must be >= 0");
  }
  else if (name == "kv-idle-ttl-s") c.kv_idle_ttl_s = parse_seconds(name, v, 0);
  else if (name == "kv-pin-max-wait-s") c.kv_pin_max_wait_s = parse_seconds(name, v, 0);
  else if (name == "kv-pin-relaxed-wait-s") c.kv_pin_relaxed_wait_s = parse_seconds(name, v, 0);
  else if (name == "kv-spill-min-tokens") c.kv_spill_min_tokens = std::stoi(v);
  else if (name == "client-tool-park-s") c.client_tool_park_s = parse_seconds(name, v, 0);
  else if (name == "response-kv-ttl-s") c.response_kv_ttl_s = parse_seconds(name, v, 0);
  else if (name == "device") c.device = v;
  else if (name == "chat-family") c.chat_family = v;   // checked when the engines load
  else if (name == "log-level") {
    static const std::set<std::string> k_levels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
    if (!k_levels.count(v)) throw std::invalid_argument("--log-level must be trace, debug, info, warn, error, critical or off");
    c.log_level = v;
  } else if (name == "log-format") {
    if (v != "text" && v != "json") throw std::invalid_argument("--log-format must be text or json");
    c.log_format = v;
  } else if (name == "metrics-token") c.metrics_token = v;
  else if (name == "port-file") c.port_file = v;
  else if (name == "tls-cert") c.tls_cert = v;
  else if (name == "tls-key") c.tls_key = v;
  else if (name == "lease-ms") c.lease_ms = std::stoll(v);
  else if (name == "heartbeat-ms") c.heartbeat_ms = std::stoll(v);
  else if (name == "reclaim-idle-ms") c.reclaim_idle_ms = std::stoll(v);
  else if (name == "reclaim-interval-ms") c.reclaim_interval_ms = std::stoll(v);
  else if (name == "max-deliveries") c.max_deliveries = std::stoi(v);
  else if (name == "model-ttl-h") {
    size_t idx = 0;
    try {
      c.model_ttl_h = std::stod(v, &idx);
    } catch (const std::exception&) {
      idx = 0;
    }
    if (idx == 0 || idx != v.size() || !(c.model_ttl_h >= 0) || c.model_ttl_h > 1e6)
      throw std::invalid_argument("--model-ttl-h must be a number of hours >= 0");
  }
  else if (name == "remote") c.remote = v;
  else if (name == "control-plane-token") c.control_plane_token = v;
  else if (name == "worker-token") c.worker_token = v;
  else if (name == "worker-tokens-file") c.worker_tokens_file = v;
  else if (name == "protocol-version") {
    c.protocol_version = std::stoi(v);
    if (c.protocol_version < 1 || c.protocol_version > 99) throw std::invalid_argument("--protocol-version must be 1..99");
  }
  else if (name == "retention-days") {
    c.retention_days = std::stod(v);
    if (c.retention_days < 0) throw std::invalid_argument("--retention-days must be >= 0");
  }
  else throw std::invalid_argument("unknown option --" + name);
}

void apply_file(config& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read config file '" + path + "'");
  json j = json::parse(in);
  if (!j.is_object()) throw std::invalid_argument("config file must hold a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string name = it.key();
    for (char& ch : name)
      if (ch == '_') ch = '-';
    const json& v = it.value();
    if (name == "models") {
      for (const auto& m : v) {
        if (m.is_object()) {
          c.models.push_back(m.at("path").get<std::string>());
          c.model_chat_families.resize(c.models.size() - 1);
          c.model_chat_families.push_back(m.value("chat_family", std::string()));
          c.model_drafts.resize(c.models.size() - 1);
          c.model_drafts.push_back(m.value("draft_model", std::string()));
        } else {
          c.models.push_back(m.get<std::string>());
        }
      }
    } else if (name == "webhook-schedule-ms") {
      c.webhook_schedule_ms = v.get<std::vector<int64_t>>();
    } else if (name == "allow-addresses" && v.is_array()) {
      std::string s;
      for (const auto& a : v) s += (s.empty() ? "" : ",") + a.get<std::string>();
      c.allow_addresses = s;
    } else {
      set_option(c, name, v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
}

}  // namespace

std::optional<config> parse_config(int argc, char** argv, std::string* error, bool* help) {
  config c;
  *help = false;
  try {
    // --config first, so flags override it
    for (int i = 1; i + 1 < argc; ++i)
      if (std::string(argv[i]) == "--config") apply_file(c, argv[i + 1]);
    static const std::pair<const char*, const char*> k_env[] = {
        {"AGENTQ_ROLE", "role"},       {"AGENTQ_LISTEN", "listen"}, {"AGENTQ_DATA_DIR", "data-dir"},
        {"AGENTQ_REDIS", "redis"},     {"AGENTQ_ALLOW_ADDRESSES", "allow-addresses"},
        {"AGENTQ_ADMIN_KEY", "admin-key"}, {"AGENTQ_LOG_LEVEL", "log-level"},
        {"AGENTQ_LOG_FORMAT", "log-format"}, {"AGENTQ_METRICS_TOKEN", "metrics-token"},
        {"AGENTQ_TLS_CERT", "tls-cert"}, {"AGENTQ_TLS_KEY", "tls-key"}, {"AGENTQ_WORKER_ID", "worker-id"},
        {"AGENTQ_REMOTE", "remote"}, {"AGENTQ_CONTROL_PLANE_TOKEN", "control-plane-token"},
        {"AGENTQ_WORKER_TOKEN", "worker-token"}};
    for (auto [env, name] : k_env)
      if (const char* v = std::getenv(env); v && *v) set_option(c, name, v);
    std::vector<std::string> flag_models, flag_families, flag_drafts;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        *help = true;
        return c;
      }
      if (!a.starts_with("--")) throw std::invalid_argument("unexpected argument '" + a + "'");
      if (a == "--no-spec") {  // the one flag without a value
        c.spec = false;
        continue;
      }
      std::string name = a.substr(2), value;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else {
        if (i + 1 >= argc) throw std::invalid_argument("--" + name + " needs a value");
        value = argv[++i];
      }
      if (name == "config") continue;
      if (name == "model") {
        flag_models.push_back(value);
        flag_families.emplace_back();
        flag_drafts.emplace_back();
      } else if (name == "draft-model") {
        // NOTE: a draft serves one model: the --model before it.
        if (flag_models.empty()) throw std::invalid_argument("--draft-model must follow the --model it serves");
        if (value.empty()) throw std::invalid_argument("--draft-model needs a path");
        flag_drafts.back() = value;
      } else if (name == "chat-family" && !flag_models.empty()) {
        // NOTE: after a --model it is that model's; before any, the default (the old meaning).
        if (value.empty()) throw std::invalid_argument("--chat-family needs a family name");
        flag_families.back() = value;
      } else {
        set_option(c, name, value);
      }
    }
    if (!flag_models.empty()) {  // flags replace file models
      c.models = flag_models;
      c.model_chat_families = flag_families;
      c.model_drafts = flag_drafts;
    }
    if (c.models.empty()) {
      if (const char* m = std::getenv("AGENTQ_MODEL"); m && *m) c.models.push_back(m);
    }
    if (c.models.empty()) {
      // the default tiny model beside the checkout (../shared), found from the binary's location
      std::error_code ec;
      auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
      for (auto dir = exe.parent_path(); !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
        auto cand = dir / ".." / "shared" / "models" / "stories260K.gguf";
        if (std::filesystem::exists(cand, ec)) {
          c.models.push_back(std::filesystem::weakly_canonical(cand, ec).string());
          break;
        }
      }
    }
    // NOTE: a control plane may know its models from the fleet alone (--model-ttl-h).
    if (c.models.empty() && c.role != role::api)
      throw std::invalid_argument("no model: pass --model PATH or set AGENTQ_MODEL");
    if (c.tls_cert.empty() != c.tls_key.empty())
      throw std::invalid_argument("--tls-cert and --tls-key go together (a certificate chain and its private key)");
    if (!c.remote.empty()) {
      if (c.role != role::worker) throw std::invalid_argument("--remote needs --role worker");
      if (!c.remote.starts_with("http://") && !c.remote.starts_with("https://"))
        throw std::invalid_argument("--remote must be an http:// or https:// URL of the control plane");
      if (c.control_plane_token.empty())
        throw std::invalid_argument("--remote needs --control-plane-token (or AGENTQ_CONTROL_PLANE_TOKEN)");
      if (c.redis.empty()) throw std::invalid_argument("--remote needs --redis (the control plane's Redis)");
    }
    if (!c.worker_token.empty() && c.role == role::worker)
      throw std::invalid_argument("--worker-token is the control plane's (--role api or all)");
    if (!c.worker_tokens_file.empty() && c.role == role::worker)
      throw std::invalid_argument("--worker-tokens-file is the control plane's (--role api or all)");
    c.model_chat_families.resize(c.models.size());
    c.model_drafts.resize(c.models.size());
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return std::nullopt;
  }
  return c;
}

}  // namespace agentq::daemon
