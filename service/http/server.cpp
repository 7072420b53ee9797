// Beast HTTP server: listener, sessions (do_read_header/on_read_header, do_read_body/
// on_read_body, do_write/on_write), limits and streaming responses (see server.h); one session
// template over a plain TCP stream or a TLS stream (OpenSSL, --tls-cert/--tls-key).
#include "http/server.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/http/file_body.hpp>
#include <filesystem>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unistd.h>
#include <vector>

#include "http/errors.h"
#include "http/request_parse.h"
#include <agentq/thread_class.h>

namespace agentq::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

namespace {

// What stop() needs of a session of either stream type.
class session_base {
 public:
  virtual ~session_base() = default;
  virtual void close_if_idle() = 0;
};

struct shared_state {
  server_options options;
  server::handler_fn handler;
  std::atomic<int64_t> n_connections{0}, n_requests{0}, n_rejected{0};
  std::atomic<int32_t> n_streams{0};
  std::atomic<bool> stopping{false};
  // Live sessions, so stop() can close the idle ones; drain_cv fires when n_connections hits 0.
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  std::unordered_map<session_base*, std::weak_ptr<session_base>> sessions;  // guarded by drain_mu
  std::optional<asio::ssl::context> tls;  // set: every connection is TLS (tls_cert_file/tls_key_file)
};

const char* reason(int status) {
  return bhttp::obsolete_reason(bhttp::status(status)).data();
}

using plain_stream = beast::tcp_stream;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

// Upload file names: one counter for plain and TLS sessions alike (a function-local static in
// the template would be one per instantiation, and two sessions could pick the same name).
std::atomic<uint64_t> upload_seq{0};

template <class Stream>
class session : public session_base, public std::enable_shared_from_this<session<Stream>> {
  static constexpr bool k_tls = std::is_same_v<Stream, tls_stream>;
  using std::enable_shared_from_this<session<Stream>>::shared_from_this;
  using std::enable_shared_from_this<session<Stream>>::weak_from_this;

 public:
  template <class... Tls>
  session(tcp::socket socket, std::shared_ptr<shared_state> state, std::shared_ptr<asio::io_context> ioc, Tls&... tls)
      : ioc_(std::move(ioc)), stream_(std::move(socket), tls...), state_(std::move(state)),
        buffer_(state_->options.max_header_bytes + 4096) {
    ++state_->n_connections;
  }
  ~session() {
    std::lock_guard lock(state_->drain_mu);
    state_->sessions.erase(this);
    if (--state_->n_connections == 0) state_->drain_cv.notify_all();
  }

  void run() {
    {
      std::lock_guard lock(state_->drain_mu);
      state_->sessions.emplace(this, weak_from_this());
    }
    if constexpr (k_tls) {
      // NOTE: the handshake counts against the header timeout, as the head it precedes.
      idle_ = true;
      lowest().expires_after(state_->options.header_timeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              beast::bind_front_handler(&session::on_handshake, this->shared_from_this()));
    } else {
      asio::dispatch(stream_.get_executor(), beast::bind_front_handler(&session::do_read_header, shared_from_this()));
    }
  }

  // Reject before reading anything (connection limit). A TLS connection is closed without an
  // answer: it has no session to answer in yet.
  void reject_busy() {
    ++state_->n_rejected;
    if (state_->options.on_rejected) state_->options.on_rejected("", 503);
    if constexpr (k_tls) {
      close();
    } else {
      send_error(error_kind::unavailable, "server is at its connection limit; retry later", true);
    }
  }

  // Graceful stop: close the connection if it waits for a new request (keep-alive idle or
  // part of a head); a request already read finishes and closes after its response.
  void close_if_idle() override {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->idle_) self->close();
    });
  }

 private:
  // NOTE: the head is read with our own loop (not bhttp::async_read_header) so that
  // put_head sees the raw head bytes (obs-fold check) before the parser consumes them.
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void on_handshake(beast::error_code ec) {
    if (ec) {
      spdlog::debug("http: TLS handshake failed: {}", ec.message());
      return close();  // NOTE: plain HTTP on the TLS port lands here: closed, nothing to answer in
    }
    do_read_header();
  }

  void do_read_header() {
    if (state_->stopping) return close();
    idle_ = true;
    parser_.emplace();
    init_parser(*parser_, state_->options);
    n_head_bytes_ = 0;
    lowest().expires_after(state_->options.header_timeout);
    if (buffer_.size() > 0) return parse_head();  // pipelined bytes from the last request
    read_head_some();
  }

  void read_head_some() {
    size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0)
      return reject({error_kind::header_too_large,
                     "request headers exceed " + std::to_string(state_->options.max_header_bytes) + " bytes"});
    stream_.async_read_some(buffer_.prepare(std::min<size_t>(room, 4096)),
                            beast::bind_front_handler(&session::on_read_head_some, shared_from_this()));
  }

  void on_read_head_some(beast::error_code ec, size_t n) {
    if (ec) {
      if (ec == beast::error::timeout && buffer_.size() > 0) ++state_->n_rejected;  // slowloris
      return close();
    }
    buffer_.commit(n);
    parse_head();
  }

  void parse_head() {
    auto data = buffer_.data();
    head_step step = put_head(*parser_, {static_cast<const char*>(data.data()), data.size()}, state_->options,
                              buffer_.max_size(), &n_head_bytes_);
    buffer_.consume(step.n_used);
    if (step.st == head_step::status::rejected) return reject(std::move(step.why));
    if (step.st == head_step::status::need_more) return read_head_some();
    idle_ = false;  // a request: stop() lets it finish
    if (!parser_->is_done() && is_upload(*parser_, state_->options)) return start_upload();
    if (parser_->is_done()) return handle();
    lowest().expires_after(state_->options.body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      beast::bind_front_handler(&session::on_read_body, shared_from_this()));
  }

  void on_read_body(beast::error_code ec, size_t) {
    if (ec) {
      auto why = body_read_rejection(ec, state_->options);
      if (!why) {
        ++state_->n_rejected;
        return close();
      }
      return reject(std::move(*why));
    }
    handle();
  }

  // --- uploads (server_options::upload_path): the body goes to a file -------------
  void start_upload() {
    upload_file_ = (std::filesystem::path(state_->options.upload_dir) /
                    ("upload-" + std::to_string(::getpid()) + "-" + std::to_string(++upload_seq) + ".part"))
                       .string();
    upload_.emplace(std::move(*parser_));
    upload_->body_limit(state_->options.max_upload_bytes);
    beast::error_code ec;
    upload_->get().body().open(upload_file_.c_str(), beast::file_mode::write, ec);
    if (ec) {
      spdlog::error("http: cannot create upload file {}: {}", upload_file_, ec.message());
      upload_.reset();
      return reject({error_kind::unavailable, "cannot store the upload right now; retry"});
    }
    lowest().expires_after(state_->options.upload_body_timeout);
    bhttp::async_read(stream_, buffer_, *upload_,
                      beast::bind_front_handler(&session::on_read_upload, shared_from_this()));
  }

  void on_read_upload(beast::error_code ec, size_t) {
    upload_->get().body().close();
    if (ec) {
      drop_upload();
      if (ec == bhttp::error::body_limit)
        return reject({error_kind::payload_too_large, "the upload exceeds " +
                                                          std::to_string(state_->options.max_upload_bytes) +
                                                          " bytes (--max-file-bytes)"});
      auto why = body_read_rejection(ec, state_->options);
      if (!why) {
        ++state_->n_rejected;
        return close();
      }
      return reject(std::move(*why));
    }
    const auto& breq = upload_->get();
    keep_alive_ = breq.keep_alive() && !state_->stopping;
    version_ = breq.version();
    request req = to_request_head(breq.base());
    req.body_file = upload_file_;
    run_handler(std::move(req), false);
    drop_upload();
  }

  void drop_upload() {
    upload_.reset();
    std::error_code fec;
    if (!upload_file_.empty()) std::filesystem::remove(upload_file_, fec);
    upload_file_.clear();
  }

  void handle() {
    auto& breq = parser_->get();
    keep_alive_ = breq.keep_alive() && !state_->stopping;
    version_ = breq.version();
    bool head = breq.method() == bhttp::verb::head;
    run_handler(to_request(*parser_), head);
  }

  void run_handler(request req, bool head) {
    // NOTE: the peer's address is asked once per connection (a getpeername per request before).
    if (!remote_known_) {
      beast::error_code ep_ec;
      auto ep = lowest().socket().remote_endpoint(ep_ec);
      if (!ep_ec) remote_ = ep.address().to_string();
      remote_known_ = true;
    }
    req.remote = remote_;
    ++state_->n_requests;

    response res;
    try {
      res = state_->handler(req);
    } catch (const std::exception& e) {
      spdlog::error("http: handler for {} {} threw: {}", req.method, req.path, e.what());
      res = error_response(error_kind::internal, "internal error");
    }
    if (res.deferred) return defer(std::move(res.deferred), head);
    if (res.stream) return start_stream(std::move(res));
    send(std::move(res), head);
  }

  // A deferred response (response::deferred): the io thread returns to its other connections; the
  // reply posts the making and the write back onto the io thread that owns this connection. Nothing is read from
  // this connection meanwhile (no read is pending), so answers keep the requests' order.
  void defer(std::function<void(reply_fn)> start, bool head) {
    // NOTE: the reply may outlive the server (a commit slower than stop()'s drain): it holds the
    // connection's io_context, released after the session (members go in reverse order), so the
    // session's socket never outlives its reactor; a post to a stopped context just never runs (and
    // that context is then kept to the process's end). The session itself holds it weakly: no cycle.
    struct pending {
      std::shared_ptr<asio::io_context> ioc;
      std::shared_ptr<session> self;
      std::atomic<bool> replied{false};
      std::string upload;  // the request's body_file: the handler may read it until its answer is made
      ~pending() {
        std::error_code ec;
        if (!upload.empty()) std::filesystem::remove(upload, ec);
      }
    };
    auto p = std::make_shared<pending>();
    p->ioc = ioc_.lock();
    p->self = shared_from_this();
    // NOTE: a handler run on the blocking pool (router.h) reads an upload after run_handler has
    // returned: the file is the reply's to remove now, not on_read_upload's.
    p->upload = std::exchange(upload_file_, std::string());
    reply_fn reply = [p, head](std::function<response()> make) {
      if (p->replied.exchange(true)) return;
      asio::post(p->self->stream_.get_executor(),
                 [p, head, make = std::move(make)] { p->self->finish_deferred(make, head); });
    };
    try {
      start(reply);
    } catch (const std::exception& e) {
      spdlog::error("http: deferred handler threw: {}", e.what());
      reply([] { return error_response(error_kind::internal, "internal error"); });
    }
  }

  void finish_deferred(const std::function<response()>& make, bool head) {
    response res;
    try {
      res = make();
    } catch (const std::exception& e) {
      spdlog::error("http: deferred response threw: {}", e.what());
      res = error_response(error_kind::internal, "internal error");
    }
    if (res.stream) return start_stream(std::move(res));
    send(std::move(res), head);
  }

  void send(response res, bool head = false) {
    auto out = std::make_shared<bhttp::response<bhttp::string_body>>();
    out->version(version_);
    out->result(bhttp::status(res.status));
    out->set(bhttp::field::server, "agentq");
    if (!res.body.empty() || res.status >= 200) out->set(bhttp::field::content_type, res.content_type);
    for (auto& [k, v] : res.headers) out->set(k, v);
    keep_alive_ = keep_alive_ && !state_->stopping;  // NOTE: stop() may have begun while the handler ran
    out->keep_alive(keep_alive_);
    out->body() = std::move(res.body);
    out->prepare_payload();
    if (head) out->body().clear();
    lowest().expires_after(state_->options.write_timeout);
    auto self = shared_from_this();
    if (head) {
      auto sr = std::make_shared<bhttp::response_serializer<bhttp::string_body>>(*out);
      bhttp::async_write_header(stream_, *sr,
                                [self, out, sr](beast::error_code ec, size_t n) { self->on_write(ec, n); });
      return;
    }
    bhttp::async_write(stream_, *out, [self, out](beast::error_code ec, size_t n) { self->on_write(ec, n); });
  }

  void on_write(beast::error_code ec, size_t) {
    if (ec || !keep_alive_) return close();
    do_read_header();
  }

  void reject(rejection why) {
    ++state_->n_rejected;
    if (state_->options.on_rejected) {
      std::string method = parser_ && parser_->is_header_done() ? std::string(parser_->get().method_string()) : "";
      state_->options.on_rejected(method, status_of(why.kind));
    }
    send_error(why.kind, why.message, true);
  }

  void send_error(error_kind kind, const std::string& message, bool close_after) {
    keep_alive_ = !close_after;
    send(error_response(kind, message));
  }

  // NOTE: a TLS connection is closed without close_notify: every response is length-delimited
  // or an event stream, so a client cannot mistake the cut for a complete body.
  void close() {
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    lowest().socket().close(ec);
  }

  // --- streaming (SSE) ------------------------------------------------------
  class sink : public stream_sink {
   public:
    sink(std::shared_ptr<session> s, std::chrono::milliseconds timeout) : s_(std::move(s)), timeout_(timeout) {}
    bool write(std::string_view data) override {
      if (closed_) return false;
      auto done = std::make_shared<std::promise<bool>>();
      auto fut = done->get_future();
      auto buf = std::make_shared<std::string>(data);
      auto s = s_;
      asio::post(s->stream_.get_executor(), [s, buf, done, this_timeout = timeout_] {
        s->lowest().expires_after(this_timeout);
        asio::async_write(s->stream_, asio::buffer(*buf),
                          [buf, done](beast::error_code ec, size_t) { done->set_value(!ec); });
      });
      if (fut.wait_for(timeout_ + std::chrono::seconds(1)) != std::future_status::ready || !fut.get()) closed_ = true;
      if (s_->state_->stopping) closed_ = true;
      return !closed_;
    }
    bool closed() const override { return closed_ || s_->state_->stopping; }

   private:
    std::shared_ptr<session> s_;
    std::chrono::milliseconds timeout_;
    std::atomic<bool> closed_{false};
  };

  void start_stream(response res) {
    if (state_->n_streams.fetch_add(1) >= state_->options.max_streams) {
      --state_->n_streams;
      return send_error(error_kind::unavailable, "too many open event streams; retry later", true);
    }
    std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason(res.status) +
                       "\r\nServer: agentq\r\nContent-Type: " + res.content_type +
                       "\r\nCache-Control: no-cache\r\nConnection: close\r\n";
    for (auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    auto self = shared_from_this();
    auto state = state_;
    std::thread([self, state, head = std::move(head), fn = std::move(res.stream)] {
      {
        sink out(self, state->options.write_timeout);
        if (out.write(head)) fn(out);
      }
      asio::post(self->stream_.get_executor(), [self] { self->close(); });
      --state->n_streams;
    }).detach();
  }

  std::weak_ptr<asio::io_context> ioc_;  // the context this connection lives on (a deferred reply holds it)
  Stream stream_;
  std::shared_ptr<shared_state> state_;
  beast::flat_buffer buffer_;  // max size set in the constructor (room for a whole head)
  std::optional<request_parser> parser_;
  std::optional<bhttp::request_parser<bhttp::file_body>> upload_;  // an upload's body reader
  std::string upload_file_;                                           // its file; removed after the handler
  size_t n_head_bytes_ = 0;  // of the request being read, consumed by the parser so far
  std::string remote_;         // the peer's address (run_handler asks once)
  bool remote_known_ = false;
  bool keep_alive_ = false;
  bool idle_ = false;  // waiting for the next request's head (see close_if_idle)
  unsigned version_ = 11;
};

}  // namespace

// NOTE: one io_context per thread (issue 29), each run by its one thread, a connection staying on the
// context it was accepted onto (round robin): a completion never wakes another io thread, and a
// deferred answer (response::deferred) posted from the store's writer wakes exactly the thread that
// owns the connection. A shared io_context with 16 threads cost ~27 futex calls per submit once the
// submit stopped blocking its thread (Asio's scheduler waking idle threads for each handler). The
// price: a handler that blocks (reads, cancel) stalls only its own thread's connections.
struct server::impl {
  std::shared_ptr<shared_state> state = std::make_shared<shared_state>();
  std::vector<std::shared_ptr<asio::io_context>> iocs;  // [n_threads]; iocs[0] also runs the acceptor
  size_t next_ioc = 0;                                  // round robin for accepted connections
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  // NOTE: keeps each ioc.run() going while a stream thread (SSE) is between writes: once stop()
  // closes the acceptor such a session has no pending operation, the io threads would return,
  // and the close the stream thread posts when it ends would never run (the full drain wait).
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  uint16_t port = 0;
  bool running = false;

  template <class S>
  void start_session(std::shared_ptr<S> s) {
    if (state->n_connections > state->options.max_connections)
      s->reject_busy();
    else
      s->run();
  }

  void do_accept() {
    // NOTE: the pending accept names its owner by index, not by shared_ptr: the op lives inside
    // iocs[0], so holding a context there would keep it (and itself) alive forever (LSan saw it).
    const size_t k = next_ioc++ % iocs.size();  // only the acceptor's thread runs this
    acceptor->async_accept(*iocs[k], [this, k](beast::error_code ec, tcp::socket socket) {
      on_accept(ec, std::move(socket), iocs[k]);
    });
  }
  void on_accept(beast::error_code ec, tcp::socket socket, const std::shared_ptr<asio::io_context>& owner) {
    if (ec == asio::error::operation_aborted || state->stopping) return;
    if (!ec) {
      if (state->tls)
        start_session(std::make_shared<session<tls_stream>>(std::move(socket), state, owner, *state->tls));
      else
        start_session(std::make_shared<session<plain_stream>>(std::move(socket), state, owner));
    }
    do_accept();
  }
};

server::server(server_options options, handler_fn handler) : impl_(std::make_unique<impl>()) {
  impl_->state->options = std::move(options);
  impl_->state->handler = std::move(handler);
}

server::~server() {
  stop();
}

bool server::start(std::string* error) {
  beast::error_code ec;
  const auto& o = impl_->state->options;
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    if (error) *error = "TLS needs both a certificate (--tls-cert) and its private key (--tls-key)";
    return false;
  }
  if (!o.tls_cert_file.empty()) {
    auto& ctx = impl_->state->tls.emplace(asio::ssl::context::tls_server);
    ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                    asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1 |
                    asio::ssl::context::single_dh_use);
    ctx.use_certificate_chain_file(o.tls_cert_file, ec);
    if (ec) {
      if (error) *error = "--tls-cert '" + o.tls_cert_file + "': " + ec.message();
      impl_->state->tls.reset();
      return false;
    }
    ctx.use_private_key_file(o.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) {
      if (error) *error = "--tls-key '" + o.tls_key_file + "': " + ec.message();
      impl_->state->tls.reset();
      return false;
    }
    if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
      if (error) *error = "--tls-key does not match the certificate in --tls-cert";
      impl_->state->tls.reset();
      return false;
    }
  }
  auto addr = asio::ip::make_address(impl_->state->options.host, ec);
  if (ec) {
    if (error) *error = "invalid listen address '" + impl_->state->options.host + "'";
    return false;
  }
  tcp::endpoint ep(addr, impl_->state->options.port);
  impl_->iocs.clear();
  for (int32_t i = 0; i < std::max(1, impl_->state->options.n_threads); ++i)
    impl_->iocs.push_back(std::make_shared<asio::io_context>(1));  // concurrency hint: one thread runs it
  impl_->acceptor.emplace(*impl_->iocs[0]);
  impl_->acceptor->open(ep.protocol(), ec);
  if (!ec) impl_->acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor->bind(ep, ec);
  if (!ec) impl_->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    if (error)
      *error = "cannot listen on " + impl_->state->options.host + ":" + std::to_string(impl_->state->options.port) +
               ": " + ec.message();
    impl_->acceptor.reset();
    return false;
  }
  impl_->port = impl_->acceptor->local_endpoint().port();
  impl_->do_accept();
  impl_->running = true;
  for (auto& ioc : impl_->iocs) {
    impl_->work.push_back(asio::make_work_guard(*ioc));
    impl_->threads.emplace_back([ioc = ioc.get()] {
      util::name_thread("aq-http");  // per-thread profiles name it
      ioc->run();
    });
  }
  return true;
}

void server::stop() {
  if (!impl_->running) return;
  impl_->running = false;
  auto& state = *impl_->state;
  state.stopping = true;
  asio::post(*impl_->iocs[0], [this] {
    beast::error_code ec;
    impl_->acceptor->close(ec);
  });
  // Drain: idle connections close now; a request already read runs its handler, writes its
  // response (Connection: close) and closes; streams notice `stopping` at their next write.
  // NOTE: the io threads keep running until every session is gone (or drain_timeout): an
  // ioc.stop() while a response is being written would cut it off mid-body.
  std::vector<std::shared_ptr<session_base>> live;
  {
    std::lock_guard lock(state.drain_mu);
    for (auto& [_, weak] : state.sessions)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->close_if_idle();
  live.clear();  // NOTE: a session must not outlive the wait below because we hold it
  {
    std::unique_lock lock(state.drain_mu);
    if (!state.drain_cv.wait_for(lock, state.options.drain_timeout, [&] { return state.n_connections == 0; }))
      spdlog::warn("http: {} connection(s) still open after the {} ms drain; cutting them", state.n_connections.load(),
                   state.options.drain_timeout.count());
  }
  impl_->work.clear();
  for (auto& ioc : impl_->iocs) ioc->stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

uint16_t server::port() const {
  return impl_->port;
}

server_stats server::stats() const {
  return {impl_->state->n_connections.load(), impl_->state->n_requests.load(), impl_->state->n_rejected.load()};
}

}  // namespace agentq::http
