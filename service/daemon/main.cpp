// agentqd: the agentq daemon. All-in-one by default (API + worker + webhook sender), or
// one role. Wires store, queue, engine, worker, webhooks and the HTTP server, and shuts
// down gracefully on SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <thread>

#include <agentq/engine.h>

#include "api/api.h"
#include "api/http_metrics.h"
#include "api/model_catalog.h"
#include "api/batch_feeder.h"
#include "api/batch_runner.h"
#include "api/batch_specs.h"
#include "api/openai_registry.h"
#include "api/queue_depth.h"
#include "api/tenant_quota.h"
#include "api/worker_protocol.h"
#include "auth/keys.h"
#include "auth/rate_limiter.h"
#include "daemon/config.h"
#include "daemon/control_plane.h"
#include "daemon/redis_supervisor.h"
#include "http/blocking_pool.h"
#include "http/router.h"
#include "http/server.h"
#include "metrics/registry.h"
#include "net/http_client.h"
#include "obs/engine_sampler.h"
#include "obs/job_metrics.h"
#include "obs/log_format.h"
#include "obs/obs_store.h"
#include "obs/process_metrics.h"
#include "ops/backup.h"
#include "ops/retention.h"
#include "store/batch_store.h"
#include "queue/queue.h"
#include "queue/redis_client.h"
#include "queue/redis_url.h"
#include "store/store.h"
#include "util/crypto.h"
#include <agentq/thread_class.h>
#include "webhooks/dispatcher.h"
#include "webhooks/signing.h"
#include "worker/identity.h"
#include "worker/model_share.h"
#include "worker/protocol.h"
#include "worker/remote_control_plane.h"
#include "worker/worker.h"

namespace fs = std::filesystem;
using namespace agentq;

namespace {

void setup_logging(const daemon::config& c) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((fs::path(c.data_dir) / "agentqd.log").string());
  auto logger = std::make_shared<spdlog::logger>("agentqd", spdlog::sinks_init_list{console, file});
  logger->set_formatter(obs::make_log_formatter(*obs::parse_log_format(c.log_format)));  // validated by config
  logger->set_level(spdlog::level::from_str(c.log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

int run(const daemon::config& c) {
  bool serve_api = c.role != daemon::role::worker;
  bool run_worker = c.role != daemon::role::api;
  std::string err;
  // --worker-nice: the job-running threads (engine, job threads; the dispatcher half as much) yield
  // the CPUs to the HTTP threads and the store's writer. Set before any of them starts: each takes
  // it as it names itself.
  util::set_throughput_nice(run_worker ? c.worker_nice : 0);

  // SSRF allow-list
  auto allow = net::parse_cidr_list(c.allow_addresses, &err);
  if (!allow) {
    std::fprintf(stderr, "agentqd: --allow-addresses: %s\n", err.c_str());
    return 2;
  }
  net::ssrf_guard guard(*allow);

  // Redis
  queue::queue_options qopts;
  std::unique_ptr<daemon::redis_supervisor> embedded_redis;
  if (c.redis.empty()) {
    embedded_redis = std::make_unique<daemon::redis_supervisor>((fs::path(c.data_dir) / "redis").string());
    if (!embedded_redis->start(&err)) {
      spdlog::critical("cannot start the embedded redis-server: {}", err);
      return 1;
    }
    qopts.redis.port = embedded_redis->port();
  } else {
    auto parsed = queue::parse_redis_url(c.redis, &err);
    if (!parsed) {
      spdlog::critical("{}: '{}'", err, queue::redact_redis_url(c.redis));  // NOTE: never the password
      return 2;
    }
    qopts.redis = *parsed;
  }

  // A worker's stable identity (locked for this process's life)
  std::unique_ptr<worker::worker_identity> identity;
  if (run_worker) {
    identity = worker::worker_identity::acquire(c.worker_id, c.data_dir, &err);
    if (!identity) {
      spdlog::critical("{}", err);
      return 2;
    }
  }

  // Store (applies migrations) and the API's tables. NOTE: a remote worker (--remote) opens none of
  // them: every read and write of its jobs goes to the control plane as a message.
  const bool remote_worker = !c.remote.empty();
  store::store_options sopts;
  sopts.path = (fs::path(c.data_dir) / "agentq.db").string();
  sopts.tenant_max_running = c.tenant_max_running;
  metrics::global()
      .gauge_family("agentq_quota_tenant_max_running",
                    "Running jobs per tenant at most (--tenant-max-running; 0 = none); more wait queued.")
      .with()
      .set(double(c.tenant_max_running));
  std::unique_ptr<store::store> st;
  std::unique_ptr<auth::key_store> keys;
  std::unique_ptr<obs::obs_store> obs_db;
  if (!remote_worker) {
    st = store::store::open(sopts, &err);
    if (!st) {
      spdlog::critical("cannot open the job store: {}", err);
      return 1;
    }
    keys = auth::key_store::open(sopts.path, &err);
    if (!keys) {
      spdlog::critical("{}", err);
      return 1;
    }
    obs_db = obs::obs_store::open(sopts.path, &err);  // engine samples, timelines (service/obs)
    if (!obs_db) {
      spdlog::critical("{}", err);
      return 1;
    }
  }

  // Keys: operator-supplied admin key, or first-run bootstrap
  if (remote_worker) {
    // no keys here
  } else if (!c.admin_key.empty()) {
    if (!keys->ensure(c.admin_key, "admin", true, &err)) {
      spdlog::critical("--admin-key: {}", err);
      return 2;
    }
  } else if (keys->count_active() == 0) {
    auto k = keys->create("admin", true, &err);
    if (!k) {
      spdlog::critical("bootstrapping an admin key: {}", err);
      return 1;
    }
    // NOTE: printed once to stdout, never logged.
    std::printf("agentqd: first run: admin key (shown once):\n  AGENTQ_API_KEY=%s\n  webhook secret: %s\n",
                k->key.c_str(), k->info.webhook_secret.c_str());
    std::fflush(stdout);
  }

  // Engines. The policy sharing one device between the models of a process (CPU threads, KV
  // memory) is worker/model_share.h's; every model worker advertises it.
  const worker::model_share share =
      worker::share_models(c.device, int32_t(c.models.size()), c.engine_threads, c.kv_budget_mb,
                           int32_t(std::thread::hardware_concurrency()));
  const int32_t engine_threads = run_worker ? share.n_threads_each : c.engine_threads;
  api::engine_catalog catalog;
  // NOTE (#28): --role api loads no engine: each model's header only (tokenizer, template, hparams).
  api::header_catalog headers;
  if (c.role == daemon::role::api && !daemon::load_model_headers(c, headers, &err)) {
    spdlog::critical("{}", err);
    return 1;
  }
  const api::model_catalog& local_models = c.role == daemon::role::api ? static_cast<const api::model_catalog&>(headers)
                                                                       : catalog;
  for (size_t mi = 0; c.role != daemon::role::api && mi < c.models.size(); ++mi) {
    const std::string& path = c.models[mi];
    engine_config ec;
    ec.model_path = path;
    ec.kv_budget_bytes = uint64_t(c.kv_budget_mb) << 20;
    ec.kv_type = c.kv_type;
    ec.n_threads = engine_threads;
    ec.n_replicas = c.engine_replicas;
    ec.device = c.device;
    ec.chat_family = mi < c.model_chat_families.size() && !c.model_chat_families[mi].empty()
                         ? c.model_chat_families[mi] : c.chat_family;
    ec.spec = c.spec;
    if (mi < c.model_drafts.size()) ec.draft_model_path = c.model_drafts[mi];
    ec.spill_dir = (fs::path(c.data_dir) / "kv").string();
    ec.spill_budget_bytes = c.spill_budget_mb << 20;
    ec.kv_spill_after_s = c.spill_after_s;
    ec.kv_idle_ttl_s = c.kv_idle_ttl_s;
    ec.kv_pin_max_wait_s = c.kv_pin_max_wait_s;
    ec.kv_pin_relaxed_max_wait_s = c.kv_pin_relaxed_wait_s;
    ec.kv_spill_min_tokens = c.kv_spill_min_tokens;
    fs::create_directories(ec.spill_dir);
    auto e = worker::load_engine(ec, &err);
    if (!e) {
      spdlog::critical("{}", err);
      return 1;
    }
    spdlog::info("model '{}' loaded ({}, n_ctx {}, on {}; KV {}: {} tokens in {} MiB)", e->model().name,
                 e->model().arch, e->model().n_ctx, e->model().device, e->model().kv_type,
                 e->model().kv_capacity_tokens, c.kv_budget_mb);
    if (e->model().n_replicas > 1)
      spdlog::info("model '{}': {} data-parallel replicas (--engine-replicas), each {} KV tokens", e->model().name,
                   e->model().n_replicas, e->model().kv_capacity_tokens / e->model().n_replicas);
    spdlog::info("model '{}' chat family: {}{}", e->model().name, e->model().chat_family,
                 ec.chat_family.empty() ? " (detected from its chat template)" : " (--chat-family)");
    if (!c.spec)
      spdlog::info("model '{}': speculative decoding off (--no-spec)", e->model().name);
    else if (!e->model().draft.empty())
      spdlog::info("model '{}': draft model '{}' (speculation: prompt lookup, then the draft)", e->model().name,
                   e->model().draft);
    if (e->model().chat_family == "unknown")
      spdlog::warn("model '{}': its chat template matches no chat family; chats render as plain text and tool "
                   "jobs are refused; choose one with --model {} --chat-family NAME", e->model().name, path);
    catalog.add(std::move(e));
  }

  qopts.route_by_model = true;  // each job to its model's stream, read by the workers serving it
  qopts.reclaim_idle_ms = c.reclaim_idle_ms;
  qopts.max_deliveries = c.max_deliveries;
  // NOTE: a worker counts as alive (continuations routed to it) for 5 heartbeats after its last one.
  qopts.heartbeat_ttl_ms = 5 * c.heartbeat_ms;
  auto queue_ptr = remote_worker ? std::make_unique<queue::queue>(qopts) : std::make_unique<queue::queue>(qopts, *st);
  queue::queue& q = *queue_ptr;
  // This process's store/Redis errors: served by its own /metrics, or shipped as a worker's share.
  obs::process_metrics process_metrics(serve_api ? metrics::global() : obs::worker_registry(), st.get(), q);

  // A remote worker's link to the control plane (#28): claims, turns, tool results, events, timeline
  // rows and engine samples go there as messages; nothing here writes SQLite.
  std::unique_ptr<worker::remote_control_plane> link;
  if (remote_worker) {
    worker::remote_options ro;
    ro.url = c.remote;
    ro.token = c.control_plane_token;
    ro.version = c.protocol_version;
    ro.worker_id = identity->id();
    ro.incarnation = identity->incarnation();
    ro.retry_for_ms = c.lease_ms;  // NOTE: past the lease the job is another worker's anyway
    link = std::make_unique<worker::remote_control_plane>(ro);
    spdlog::info("remote worker: control plane {} (message protocol {}); no database is opened here", c.remote,
                 c.protocol_version);
  }

  // A worker's models' headers, for control planes that have no file for them (#28).
  std::unique_ptr<queue::header_publisher> header_pub;
  if (run_worker && !(header_pub = daemon::start_header_publisher(c, qopts, &err))) {
    spdlog::critical("{}", err);
    return 1;
  }

  // Every loaded model is served (#28): one worker per model (own dispatcher, housekeeper, job
  // threads, engine), reading that model's streams. The first keeps the process's worker id, the
  // others are "<id>.<model>"; all advertise the id as their group.
  std::vector<std::unique_ptr<worker::worker>> workers;
  std::vector<std::unique_ptr<obs::engine_sampler>> samplers;  // engine samples + worker metrics -> SQLite
  for (size_t mi = 0; run_worker && mi < catalog.list().size(); ++mi) {
    const std::string model = catalog.list()[mi].name;
    worker::worker_options wo;
    wo.model = model;
    wo.group = identity->id();
    wo.worker_id = mi == 0 ? identity->id() : identity->id() + "." + worker::worker_identity::sanitize(model);
    wo.incarnation = identity->incarnation();
    wo.n_engine_threads = engine_threads;
    wo.share = share;
    // NOTE: 128 slots per engine replica, twice the 64 sequences a replica runs a step: the jobs
    // past those wait in the engine's queue (by priority), so a slot freed while the dispatcher's
    // claim commits is not an idle place in the next step (64 bounded one-request jobs/s; two
    // replicas with 64 slots between them left each loop idle: docs/queue_perf.md, sessions 23, 39).
    const int32_t n_replicas = std::max(1, catalog.find(model)->model().n_replicas);
    wo.max_jobs = c.max_jobs > 0 ? c.max_jobs : 128 * n_replicas;
    // NOTE: the other classes keep the rest of the slots, so an interactive job claimed during a
    // Batch file does not wait for a batch job to end (docs/queue_perf.md, session 24). By default
    // the batch class keeps session 24's 48 per replica: more batch slots slowed interactive jobs
    // beside a batch (session 35: 96 of them, p50 11 -> 14 ms).
    wo.max_batch_jobs = c.max_batch_jobs > 0 ? c.max_batch_jobs
                        : c.max_jobs > 0     ? std::max(1, wo.max_jobs * 3 / 4)
                                             : 48 * n_replicas;
    wo.batch_end_linger_us = static_cast<int64_t>(c.batch_end_linger_ms * 1000);
    wo.lease_ms = c.lease_ms;
    wo.heartbeat_ms = c.heartbeat_ms;
    wo.reclaim_interval_ms = c.reclaim_interval_ms;
    wo.max_deliveries = c.max_deliveries;
    wo.shutdown_spill_s = c.shutdown_spill_s;  // w->stop() below writes resident KV to disk
    wo.client_tool_park_s = c.client_tool_park_s;
    wo.response_kv_ttl_s = c.response_kv_ttl_s;  // a stored response's KV kept for previous_response_id
    // server-side tools go through the worker's built-in client: net::http_client + signing
    wo.tool_allow_cidrs = c.allow_addresses;
    if (remote_worker) {
      // NOTE: a job's signing secret comes with its claim (control_plane::tool_secret), only for the jobs run here.
      wo.timeline = link.get();
      auto& w = workers.emplace_back(std::make_unique<worker::worker>(wo, catalog.find(model), *link, q, true));
      w->start();
      samplers.emplace_back(std::make_unique<obs::engine_sampler>(*link, catalog.find(model), w->id()))->start();
      continue;
    }
    // a job's tool requests are signed with the whsec_ secret of the key that submitted it
    wo.tool_secret = [k = keys.get()](const std::string& job_id, const std::string& tenant) {
      return k->webhook_secret_for(job_id, tenant);
    };
    wo.timeline = obs_db.get();
    auto& w = workers.emplace_back(std::make_unique<worker::worker>(wo, catalog.find(model), *st, q, true));
    w->start();
    samplers.emplace_back(std::make_unique<obs::engine_sampler>(*obs_db, catalog.find(model), w->id()))->start();
  }
  // NOTE: after this process's workers announced themselves, so jobs of a restart's outbox are not
  // marked "waiting" for a model that is about to be served here.
  q.start_relay();

  std::unique_ptr<webhooks::dispatcher> hooks;
  std::unique_ptr<ops::retention> sweeper;
  std::unique_ptr<api::openai_registry> openai_reg;  // deleted responses, OpenAI webhook endpoints
  std::unique_ptr<store::batch_store> batches;       // Files and Batch API (issue 29)
  std::unique_ptr<api::batch_runner> batch_run;
  std::unique_ptr<store::batch_store> feed_batches;  // the batch feeder's own connection
  std::unique_ptr<api::batch_feeder> feeder;         // batch jobs into Redis, fair between tenants
  std::unique_ptr<api::queue_depth> depth;           // --max-queue-depth
  std::unique_ptr<api::tenant_quota> quota;          // --tenant-tokens-per-day
  const std::string files_dir = (fs::path(c.data_dir) / "files").string();
  std::unique_ptr<auth::rate_limiter> limiter;
  std::unique_ptr<http::server> server;
  std::unique_ptr<api::api> rest;  // outlives the router's handlers (they capture it)
  std::unique_ptr<api::worker_protocol> worker_proto;  // --worker-token: remote workers' messages
  http::router router;
  // NOTE: declared after what the handlers use, so it is joined before they go (and stopped
  // explicitly right after the server).
  std::unique_ptr<http::blocking_pool> http_pool;
  std::mutex redis_mu;
  queue::redis_client redis_probe(qopts.redis);
  std::unique_ptr<api::fleet_catalog> fleet;  // the API's models: local_models + the fleet's (#28)
  if (serve_api) {
    fleet = daemon::start_fleet_catalog(c, local_models, q);
    webhooks::dispatcher_options dopts;
    if (!c.webhook_schedule_ms.empty()) {
      dopts.schedule.clear();
      for (int64_t ms : c.webhook_schedule_ms) dopts.schedule.emplace_back(ms);
    }
    dopts.timeout = std::chrono::milliseconds(c.webhook_timeout_ms);
    auto* keys_ptr = keys.get();
    openai_reg = api::openai_registry::open(sopts.path, &err);
    if (!openai_reg) {
      spdlog::critical("{}", err);
      return 1;
    }
    hooks = webhooks::dispatcher::open(
        dopts, *st, sopts.path, net::http_client(guard),
        [keys_ptr](const std::string& job_id, const std::string& tenant) {
          return keys_ptr->webhook_secret_for(job_id, tenant);
        },
        &err);
    if (!hooks) {
      spdlog::critical("{}", err);
      return 1;
    }
    hooks->start();
    if (c.rate_limit > 0) limiter = std::make_unique<auth::rate_limiter>(c.rate_limit, c.rate_burst);

    api::api_deps deps;
    deps.store = st.get();
    deps.keys = keys.get();
    deps.limiter = limiter.get();
    deps.catalog = fleet.get();
    deps.guard = &guard;
    deps.webhooks = hooks.get();
    deps.obs = obs_db.get();
    // Retention (issue 33): the API process sweeps; deletions on request drop the job's KV here too.
    ops::retention_options ropts;
    ropts.retention_ms = int64_t(c.retention_days * 86400000.0);
    ropts.spill_dir = (fs::path(c.data_dir) / "kv").string();
    std::error_code fec;
    fs::create_directories(fs::path(files_dir) / "uploads", fec);
    batches = store::batch_store::open(sopts.path, &err);
    if (!batches || fec) {
      spdlog::critical("{}", batches ? "cannot create " + files_dir + ": " + fec.message() : err);
      return 1;
    }
    ropts.sweep_more = [b = batches.get(), files_dir](int64_t cutoff_ms) {
      auto paths = b->sweep(cutoff_ms, 64);
      for (const auto& p : paths) api::remove_batch_file(files_dir, p);
      return int64_t(paths.size());
    };
    api::batch_runner_options bro;
    bro.files_dir = files_dir;
    bro.max_line_bytes = size_t(c.max_body_bytes);
    feed_batches = store::batch_store::open(sopts.path, &err);
    if (!feed_batches) {
      spdlog::critical("{}", err);
      return 1;
    }
    feeder = std::make_unique<api::batch_feeder>(api::batch_feeder_options{},
                                                 api::batch_feeder_deps{feed_batches.get(), st.get(), &q});
    feeder->start();
    batch_run = std::make_unique<api::batch_runner>(
        bro, api::batch_runner_deps{st.get(), batches.get(), fleet.get(), &guard, feeder.get()});
    batch_run->start();
    if (c.max_queue_depth > 0 || c.max_queue_depth_per_tenant > 0) {
      depth = api::queue_depth::open(sopts.path, {c.max_queue_depth, c.max_queue_depth_per_tenant}, &err);
      if (!depth) {
        spdlog::critical("{}", err);
        return 1;
      }
    }
    deps.batches = batches.get();
    deps.runner = batch_run.get();
    deps.files_dir = files_dir;
    if (c.tenant_tokens_per_day > 0) {
      quota = api::tenant_quota::open(sopts.path, {c.tenant_tokens_per_day}, &err);
      if (!quota) {
        spdlog::critical("{}", err);
        return 1;
      }
    }
    deps.depth = depth.get();
    deps.quota = quota.get();
    deps.db_path = sopts.path;
    sweeper = std::make_unique<ops::retention>(ropts, *st, metrics::global());
    sweeper->start();
    deps.on_job_deleted = [&workers, sw = sweeper.get()](const std::string& job_id) {
      // NOTE: the worker knows the job's KV key (its own, or its previous_response_id chain's) and
      // whether a continuation holds that key now; release() frees parked KV and its spill file.
      // Split-role workers notice deletions themselves (their retained keys) or the retention sweep does.
      for (auto& wk : workers) wk->job_deleted(job_id);
      sw->notify_deleted();
    };
    deps.openai = openai_reg.get();
    deps.list_workers = [&q] { return q.list_workers(); };
    deps.ready_checks.emplace_back("database", [&st](std::string* why) {
      try {
        st->get_job("job_readyz_probe");
        return true;
      } catch (const std::exception& e) {
        *why = e.what();
        return false;
      }
    });
    deps.ready_checks.emplace_back("redis", [&redis_mu, &redis_probe](std::string* why) {
      std::lock_guard lock(redis_mu);
      auto r = redis_probe.command({"PING"});
      if (r.ok()) return true;
      *why = r.str.empty() ? "redis unreachable" : r.str;
      return false;
    });
    deps.ready_checks.emplace_back("engine", [&catalog](std::string* why) {
      for (const auto& m : catalog.list())
        if (!m.ready) {
          *why = "model '" + m.name + "' is in a failed state";
          return false;
        }
      return true;
    });
    api::api_options aopts;
    aopts.metrics_token = c.metrics_token;
    aopts.max_batch_line_bytes = size_t(c.max_body_bytes);
    rest = std::make_unique<api::api>(aopts, std::move(deps));
    rest->install(router);
    if (!c.worker_token.empty() || !c.worker_tokens_file.empty()) {  // remote workers (#28): POST /v1/worker/messages
      api::worker_protocol_options wpo;
      wpo.token = c.worker_token;
      wpo.tokens_file = c.worker_tokens_file;
      wpo.version = c.protocol_version;
      worker_proto = api::worker_protocol::open(wpo, *st, obs_db.get(), *keys, sopts.path, &err);
      if (!worker_proto) {
        spdlog::critical("{}", err);
        return 1;
      }
      api::install_worker_protocol_routes(router, *worker_proto);
      spdlog::info("remote workers accepted on {} (message protocol {}, accepting {}..{})",
                   worker::protocol::k_path, c.protocol_version, c.protocol_version - 1, c.protocol_version + 1);
    }

    http::server_options hopts;
    size_t colon = c.listen.rfind(':');
    hopts.host = colon == std::string::npos ? c.listen : c.listen.substr(0, colon);
    if (hopts.host.size() > 2 && hopts.host.front() == '[') hopts.host = hopts.host.substr(1, hopts.host.size() - 2);
    try {
      hopts.port = colon == std::string::npos ? 8080 : uint16_t(std::stoi(c.listen.substr(colon + 1)));
    } catch (...) {
      spdlog::critical("invalid --listen '{}' (expected HOST:PORT)", c.listen);
      return 2;
    }
    hopts.n_threads = c.http_threads > 0 ? c.http_threads
                                         : std::clamp(int32_t(std::thread::hardware_concurrency() / 2), 2, 8);
    http_pool = std::make_unique<http::blocking_pool>(c.http_blocking_threads);
    router.set_pool(http_pool.get());
    api::register_pool_metrics(http_pool->load());
    hopts.max_connections = c.max_connections;
    hopts.max_body_bytes = size_t(c.max_body_bytes);
    hopts.upload_path = "/v1/files";  // streamed to a file, apart from the JSON body limit
    hopts.upload_dir = (fs::path(files_dir) / "uploads").string();
    hopts.max_upload_bytes = size_t(c.max_file_bytes);
    hopts.on_rejected = api::rejection_counter();  // 413, 431, ... never reach the router
    hopts.tls_cert_file = c.tls_cert;
    hopts.tls_key_file = c.tls_key;
    server = std::make_unique<http::server>(hopts, api::instrumented(router));
    if (!server->start(&err)) {
      spdlog::critical("{}", err);
      return 1;
    }
    spdlog::info("agentqd listening on {}://{}:{}", c.tls_cert.empty() ? "http" : "https", hopts.host, server->port());
    if (!c.port_file.empty()) {
      std::ofstream pf(c.port_file + ".tmp");
      pf << server->port() << "\n";
      pf.close();
      fs::rename(c.port_file + ".tmp", c.port_file);
    }
  }

  // Wait for SIGTERM / SIGINT (blocked in every thread; see main); SIGHUP re-reads the worker tokens.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (!c.worker_tokens_file.empty()) sigaddset(&set, SIGHUP);
  int sig = 0;
  for (;;) {
    sigwait(&set, &sig);
    if (sig != SIGHUP) break;
    std::string terr;
    if (worker_proto && worker_proto->reload_tokens(&terr))
      spdlog::info("SIGHUP: worker tokens reloaded from {}", c.worker_tokens_file);
    else if (worker_proto)
      spdlog::warn("SIGHUP: {}", terr);
  }
  spdlog::info("agentqd: {} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");

  // Order: stop accepting requests, release worker claims, drain webhooks, relay, then Redis.
  if (server) server->stop();
  if (http_pool) http_pool->stop();
  if (batch_run) batch_run->stop();
  if (feeder) feeder->stop();
  // NOTE: in parallel: each worker's stop() hands its jobs back and spills its engine's KV within
  // --shutdown-spill-s, so N models take that long once, not N times.
  {
    std::vector<std::thread> stopping;
    for (auto& w : workers) stopping.emplace_back([&w] { w->stop(); });
    for (auto& t : stopping) t.join();
  }
  for (auto& sm : samplers) sm->stop();
  if (sweeper) sweeper->stop();
  if (hooks) hooks->stop();
  if (fleet) fleet->stop();
  if (header_pub) header_pub->stop();
  q.stop_relay();
  // NOTE: the rest (queue, store, embedded redis last) closes in reverse declaration order.
  spdlog::info("agentqd: stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "backup") return ops::backup_main(argc - 2, argv + 2);
  std::string err;
  bool help = false;
  auto c = daemon::parse_config(argc, argv, &err, &help);
  if (help) {
    std::fputs(daemon::usage(), stdout);
    return 0;
  }
  if (!c) {
    std::fprintf(stderr, "agentqd: %s\n\n%s", err.c_str(), daemon::usage());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(c->data_dir, ec);
  if (ec) {
    std::fprintf(stderr, "agentqd: cannot create data dir '%s': %s\n", c->data_dir.c_str(), ec.message().c_str());
    return 1;
  }
  // Block the shutdown signals in every thread; run() waits for them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  // NOTE: SIGHUP only with a tokens file to re-read; otherwise its default (terminate) is kept.
  if (!c->worker_tokens_file.empty()) sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // NOTE: past a file-size limit (RLIMIT_FSIZE) a write fails with EFBIG, like a full disk (the
  // store's write fails and the API answers 503), instead of SIGXFSZ killing the daemon.
  signal(SIGXFSZ, SIG_IGN);
  setup_logging(*c);
  return run(*c);
}
