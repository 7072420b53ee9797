// The blocking handlers' threads (see blocking_pool.h).
#include "http/blocking_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <agentq/thread_class.h>

#include "http/errors.h"

namespace agentq::http {

namespace asio = boost::asio;

struct blocking_pool::impl {
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::mutex mu;  // stop() against run()
  bool stopped = false;
  std::shared_ptr<blocking_pool_load> load = std::make_shared<blocking_pool_load>();
};

blocking_pool::blocking_pool(int32_t n_threads) : impl_(std::make_unique<impl>()) {
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->load->n_threads = std::max(1, n_threads);
  for (int32_t i = 0; i < impl_->load->n_threads; ++i)
    impl_->threads.emplace_back([ioc = &impl_->ioc] {
      util::name_thread("aq-http-pool");  // per-thread profiles tell it from the io threads
      ioc->run();
    });
}

blocking_pool::~blocking_pool() { stop(); }

std::shared_ptr<const blocking_pool_load> blocking_pool::load() const { return impl_->load; }

void blocking_pool::stop() {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    impl_->work.reset();  // run() returns once the queued handlers are done
  }
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

namespace {
// Runs on a pool thread: the handler's answer goes back through the connection's reply.
void run_and_reply(const handler& fn, request& req, const reply_fn& reply) {
  response res;
  try {
    res = fn(req);
  } catch (const std::exception& e) {
    spdlog::error("http: handler for {} {} threw: {}", req.method, req.path, e.what());
    res = error_response(error_kind::internal, "internal error");
  }
  if (res.deferred) {
    auto start = std::move(res.deferred);
    try {
      start(reply);
    } catch (const std::exception& e) {
      spdlog::error("http: deferred handler threw: {}", e.what());
      reply([] { return error_response(error_kind::internal, "internal error"); });
    }
    return;
  }
  // NOTE: the response is made already; the io thread only moves it out (std::function needs a copyable
  // callable, hence the shared_ptr).
  auto made = std::make_shared<response>(std::move(res));
  reply([made] { return std::move(*made); });
}
}  // namespace

response blocking_pool::run(request& req, const handler& fn) {
  response res;
  res.deferred = [this, fn = &fn, r = std::make_shared<request>(std::move(req))](reply_fn reply) {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) {
      reply([] {
        return error_response(error_kind::unavailable, "the server is shutting down");
      });
      return;
    }
    auto* load = impl_->load.get();  // NOTE: the pool's threads end before impl_ (stop() joins them)
    load->n_queued.fetch_add(1, std::memory_order_relaxed);
    asio::post(impl_->ioc, [fn, r, load, reply = std::move(reply)] {
      load->n_queued.fetch_sub(1, std::memory_order_relaxed);
      load->n_busy.fetch_add(1, std::memory_order_relaxed);
      run_and_reply(*fn, *r, reply);
      load->n_busy.fetch_sub(1, std::memory_order_relaxed);
    });
  };
  return res;
}

}  // namespace agentq::http
