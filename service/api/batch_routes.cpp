// Files and batches over HTTP (see batch_routes.h). An upload arrives as a file the HTTP server
// wrote (request::body_file, server_options::upload_path); it is split (multipart), checked line by
// line and written under the files directory in one pass, so memory stays flat.
#include "api/batch_routes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "api/batch_input.h"
#include "api/batch_map.h"
#include "api/batch_specs.h"
#include "api/batch_runner.h"
#include "api/queue_depth.h"
#include "api/reply.h"
#include "auth/keys.h"
#include "http/errors.h"
#include "store/batch_store.h"
#include "util/crypto.h"

namespace agentq::api {

using json = nlohmann::json;
using http::error_kind;
using http::error_response;
using http::request;
using http::response;
namespace fs = std::filesystem;

namespace {

response unavailable() {
  return error_response(error_kind::unavailable, "the Files and Batch API is not available on this server");
}

response file_not_found(const std::string& id) {
  return error_response(error_kind::not_found, "no file '" + id + "'", "file_id");
}

response batch_not_found(const std::string& id) {
  return error_response(error_kind::not_found, "no batch '" + id + "'", "batch_id");
}

// Feed the upload (a file the server wrote, else the in-memory body) to fn in 256 KiB pieces.
bool read_body(const request& req, const std::function<bool(std::string_view)>& fn) {
  if (req.body_file.empty()) return fn(req.body);
  FILE* f = std::fopen(req.body_file.c_str(), "rb");
  if (!f) return false;
  std::string buf(256 << 10, '\0');
  bool ok = true;
  size_t n;
  while (ok && (n = std::fread(buf.data(), 1, buf.size(), f)) > 0) ok = fn(std::string_view(buf.data(), n));
  std::fclose(f);
  return ok;
}

// POST /v1/files: multipart {purpose, file}.
response upload(const api_options& options, const api_deps& deps, const request& req, const auth::key_info& key) {
  auto boundary = multipart_boundary(req.header("content-type"));
  if (!boundary)
    return error_response(error_kind::invalid_request,
                          "the request body must be multipart/form-data with a boundary (fields: purpose, file)",
                          "Content-Type");
  std::string file_id = "file-" + crypto::to_hex(crypto::random_bytes(12));
  std::string rel = file_id + ".jsonl";
  std::string path = (fs::path(deps.files_dir) / rel).string();
  int fd = ::open((path + ".part").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return error_response(error_kind::unavailable, "cannot store the file right now; retry");
  struct closer {
    int& fd;
    std::string part;
    ~closer() {
      if (fd >= 0) {
        ::close(fd);
        std::remove(part.c_str());
      }
    }
  } guard{fd, path + ".part"};

  std::string purpose, filename, field, error_param = "file";
  bool in_file = false, saw_file = false, write_failed = false;
  int64_t n_bytes = 0;
  // NOTE: every line is checked as its endpoint's route would check it (model, messages, tools,
  // limits), so a batch of a bad file is refused here, at once, with the line, not hours later.
  // The specs it maps go to the file's sidecar (batch_specs.h), for the acceptance to read.
  const std::vector<model_info> models = deps.catalog->list();
  specs_writer specs(path + ".specs");
  jsonl_checker lines(
      options.max_batch_line_bytes,
      [&](int64_t, std::string_view text, batch_request_line& l, std::string* param,
          std::string* out) -> std::optional<std::string> {
        validation_error err;
        bool store_content = true;
        auto spec = batch_line_spec(l.url, l.body, *deps.catalog, *deps.guard, options.limits, &err, &store_content);
        if (!spec) {
          *param = err.param.empty() ? "body" : "body." + err.param;
          return err.message;
        }
        *out = specs_writer::record(map_for_sidecar(text, *spec, l.custom_id, store_content, models));
        return std::nullopt;
      },
      [&](std::string&& record) { specs.append(record); });
  multipart_parser* mp_ptr = nullptr;
  multipart_parser mp(*boundary, {
      [&](const std::string& name, const std::string& fname) {
        field = name;
        if (name == "file") {
          if (saw_file) {
            mp_ptr->fail("more than one 'file' part");
            error_param = "file";
            return false;
          }
          saw_file = in_file = true;
          filename = fname.empty() ? "upload.jsonl" : fname;
          return true;
        }
        if (name == "purpose" || name.starts_with("expires_after")) return true;
        mp_ptr->fail("unknown form field '" + name + "' (fields: purpose, file)");
        error_param = name;
        return false;
      },
      [&](std::string_view data) {
        if (!in_file) {
          if (field == "purpose") {
            if (purpose.size() + data.size() > 64) {
              mp_ptr->fail("'purpose' is too long");
              error_param = "purpose";
              return false;
            }
            purpose.append(data);
          }
          return true;
        }
        n_bytes += int64_t(data.size());
        for (size_t off = 0; off < data.size();) {
          ssize_t n = ::write(fd, data.data() + off, data.size() - off);
          if (n <= 0) {
            write_failed = true;
            mp_ptr->fail("cannot store the file");
            return false;
          }
          off += size_t(n);
        }
        if (!lines.feed(data)) {
          mp_ptr->fail(lines.error());
          error_param = lines.error_param().empty() ? "file" : "file." + lines.error_param();
          return false;
        }
        return true;
      },
      [&] {
        if (in_file && !lines.finish()) {
          mp_ptr->fail(lines.error());
          error_param = lines.error_param().empty() ? "file" : "file." + lines.error_param();
          return false;
        }
        in_file = false;
        return true;
      }});
  mp_ptr = &mp;
  bool ok = read_body(req, [&](std::string_view d) { return mp.feed(d); }) && mp.finish();
  if (write_failed) return error_response(error_kind::unavailable, "cannot store the file right now; retry");
  if (!ok) return error_response(error_kind::invalid_request, mp.error().empty() ? "malformed upload" : mp.error(), error_param);
  if (!saw_file) return error_response(error_kind::invalid_request, "the 'file' part is missing", "file");
  if (purpose != "batch")
    return error_response(error_kind::invalid_request,
                          purpose.empty() ? "'purpose' is required (\"batch\")"
                                          : "'purpose' must be \"batch\" (the only purpose agentq stores)",
                          "purpose");
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    fd = -1;
    std::remove((path + ".part").c_str());
    return error_response(error_kind::unavailable, "cannot store the file right now; retry");
  }
  fd = -1;
  std::error_code ec;
  fs::rename(path + ".part", path, ec);
  if (ec) return error_response(error_kind::unavailable, "cannot store the file right now; retry");
  specs.commit();  // without it the acceptance maps every line itself
  store::file_row f{file_id, key.tenant, purpose, filename, n_bytes, lines.n_requests(), lines.url(), rel,
                    deps.batches->now()};
  if (!deps.batches->add_file(f)) {
    remove_batch_file(deps.files_dir, rel);
    return error_response(error_kind::unavailable, "cannot store the file right now; retry");
  }
  spdlog::info("api: file {} ({} bytes, {} requests to {}) stored for tenant {}", file_id, n_bytes, f.n_lines,
               f.endpoints, key.tenant);
  return json_response(200, file_object(f));
}

response file_content(const api_deps& deps, const store::file_row& f) {
  std::string path = (fs::path(deps.files_dir) / f.path).string();
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) return error_response(error_kind::not_found, "the content of file '" + f.id + "' is gone", "file_id");
  response res;
  res.content_type = "application/jsonl";
  if (size <= (8u << 20)) {
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (!fp) return error_response(error_kind::unavailable, "cannot read the file right now; retry");
    res.body.resize(size);
    size_t n = std::fread(res.body.data(), 1, size, fp);
    std::fclose(fp);
    res.body.resize(n);
    return res;
  }
  // NOTE: a large file is streamed (flat memory) with its length, so clients know where it ends.
  res.headers.emplace_back("Content-Length", std::to_string(size));
  res.stream = [path](http::stream_sink& out) {
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (!fp) return;
    std::string buf(256 << 10, '\0');
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), fp)) > 0)
      if (!out.write(std::string_view(buf.data(), n))) break;
    std::fclose(fp);
  };
  return res;
}

std::optional<response> bad_metadata(const json& m) {
  if (m.is_null()) return std::nullopt;
  if (!m.is_object() || m.size() > 16)
    return error_response(error_kind::invalid_request, "'metadata' must be an object of at most 16 string values",
                          "metadata");
  for (auto it = m.begin(); it != m.end(); ++it)
    if (it.key().size() > 64 || !it->is_string() || it->get_ref<const std::string&>().size() > 512)
      return error_response(error_kind::invalid_request,
                            "'metadata." + it.key() + "' must be a string of at most 512 characters (keys 64)",
                            "metadata." + it.key());
  return std::nullopt;
}

response create_batch(const api_deps& deps, const request& req, const auth::key_info& key) {
  validation_error err;
  auto body = parse_body(req.body, req.header("content-type"), &err);
  if (!body) return from_validation(err);
  if (!body->is_object()) return error_response(error_kind::invalid_request, "the request body must be a JSON object");
  for (auto it = body->begin(); it != body->end(); ++it)
    if (it.key() != "input_file_id" && it.key() != "endpoint" && it.key() != "completion_window" &&
        it.key() != "metadata" && it.key() != "output_expires_after")
      return error_response(error_kind::invalid_request, "unknown field '" + it.key() + "'", it.key());
  auto str = [&](const char* k) -> std::optional<std::string> {
    auto it = body->find(k);
    if (it == body->end() || !it->is_string() || it->get_ref<const std::string&>().empty()) return std::nullopt;
    return it->get<std::string>();
  };
  auto file_id = str("input_file_id");
  if (!file_id) return error_response(error_kind::invalid_request, "'input_file_id' must be a file id", "input_file_id");
  auto endpoint = str("endpoint");
  if (!endpoint || !is_batch_endpoint(*endpoint))
    return error_response(error_kind::invalid_request,
                          "'endpoint' must be /v1/responses, /v1/chat/completions or /v1/jobs", "endpoint");
  auto window = str("completion_window");
  if (!window || *window != "24h")
    return error_response(error_kind::invalid_request, "'completion_window' must be \"24h\"", "completion_window");
  json meta = body->value("metadata", json(nullptr));
  if (auto bad = bad_metadata(meta)) return *bad;
  auto file = deps.batches->get_file(*file_id, key.tenant);
  if (!file) return error_response(error_kind::not_found, "no file '" + *file_id + "'", "input_file_id");
  if (file->purpose != "batch")
    return error_response(error_kind::invalid_request, "file '" + *file_id + "' has purpose '" + file->purpose +
                                                           "', not \"batch\"", "input_file_id");
  if (file->endpoints != *endpoint)
    return error_response(error_kind::invalid_request,
                          "the requests of file '" + *file_id + "' name url " + file->endpoints + ", not " + *endpoint,
                          "endpoint");
  if (deps.depth) {
    auto v = deps.depth->admit(key.tenant, file->n_lines);
    if (!v.admitted) {
      response res = error_response(error_kind::queue_full, v.message);
      res.headers.emplace_back("Retry-After", std::to_string(v.retry_after_s));
      return res;
    }
  }
  store::batch_row b;
  b.tenant = key.tenant;
  b.key_id = key.id;
  b.endpoint = *endpoint;
  b.input_file_id = *file_id;
  b.completion_window = *window;
  b.metadata_json = meta.dump();
  b.n_total = file->n_lines;
  b.expires_ms = deps.batches->now() + 24LL * 3600 * 1000;
  auto made = deps.batches->create_batch(std::move(b));
  if (!made) {
    response res = error_response(error_kind::unavailable, "could not store the batch right now; retry");
    res.headers.emplace_back("Retry-After", "1");
    return res;
  }
  if (deps.runner) deps.runner->wake();
  spdlog::info("api: batch {} ({} requests from {}) created by key {}", made->id, made->n_total, made->input_file_id,
               key.id);
  return json_response(200, batch_object(*made));
}

std::optional<int32_t> parse_limit(const std::string& v) {
  if (v.empty() || v.size() > 3) return std::nullopt;
  int32_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > 100) return std::nullopt;
  return n;
}

}  // namespace

void install_batch_routes(http::router& r, const api_options& options, const api_deps& deps, const authed_wrap& authed) {
  r.add("POST", "/v1/files", authed([options, deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          return upload(options, deps, req, key);
        }));
  r.add("GET", "/v1/files", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          int32_t limit = 100;
          for (auto& [k, v] : req.query_params()) {
            if (k == "limit") {
              auto n = parse_limit(v);
              if (!n) return error_response(error_kind::invalid_request, "limit must be 1-100", "limit");
              limit = *n;
            } else if (k != "purpose" && k != "order" && k != "after") {
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
            }
          }
          json data = json::array();
          for (const auto& f : deps.batches->list_files(key.tenant, limit)) data.push_back(file_object(f));
          return json_response(200, {{"object", "list"}, {"data", data}, {"has_more", false}});
        }));
  r.add("GET", "/v1/files/{id}", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          auto f = deps.batches->get_file(req.path_param("id"), key.tenant);
          if (!f) return file_not_found(req.path_param("id"));
          return json_response(200, file_object(*f));
        }));
  r.add("GET", "/v1/files/{id}/content", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          auto f = deps.batches->get_file(req.path_param("id"), key.tenant);
          if (!f) return file_not_found(req.path_param("id"));
          return file_content(deps, *f);
        }));
  r.add("DELETE", "/v1/files/{id}", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          std::string id = req.path_param("id");
          auto path = deps.batches->delete_file(id, key.tenant);
          if (!path) return file_not_found(id);
          remove_batch_file(deps.files_dir, *path);
          return json_response(200, {{"id", id}, {"object", "file"}, {"deleted", true}});
        }));

  r.add("POST", "/v1/batches", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          return create_batch(deps, req, key);
        }));
  r.add("GET", "/v1/batches", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          int32_t limit = 20;
          std::string after;
          for (auto& [k, v] : req.query_params()) {
            if (k == "limit") {
              auto n = parse_limit(v);
              if (!n) return error_response(error_kind::invalid_request, "limit must be 1-100", "limit");
              limit = *n;
            } else if (k == "after") {
              if (!deps.batches->get_batch(v, key.tenant))
                return error_response(error_kind::invalid_request, "'after' must be a batch id of this tenant", "after");
              after = v;
            } else {
              return error_response(error_kind::invalid_request, "unknown query parameter '" + k + "'", k);
            }
          }
          auto rows = deps.batches->list_batches(key.tenant, after, limit + 1);
          bool more = int32_t(rows.size()) > limit;
          if (more) rows.pop_back();
          json data = json::array();
          for (const auto& b : rows) data.push_back(batch_object(b));
          return json_response(200, {{"object", "list"},
                                     {"data", data},
                                     {"first_id", rows.empty() ? json(nullptr) : json(rows.front().id)},
                                     {"last_id", rows.empty() ? json(nullptr) : json(rows.back().id)},
                                     {"has_more", more}});
        }));
  r.add("GET", "/v1/batches/{id}", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          auto b = deps.batches->get_batch(req.path_param("id"), key.tenant);
          if (!b) return batch_not_found(req.path_param("id"));
          return json_response(200, batch_object(*b));
        }));
  r.add("POST", "/v1/batches/{id}/cancel", authed([deps](request& req, const auth::key_info& key) {
          if (!deps.batches) return unavailable();
          std::string id = req.path_param("id");
          for (int attempt = 0; attempt < 3; ++attempt) {
            auto b = deps.batches->get_batch(id, key.tenant);
            if (!b) return batch_not_found(id);
            if (b->status == store::batch_status::cancelling || b->status == store::batch_status::cancelled)
              return json_response(200, batch_object(*b));
            if (store::is_final(b->status) || b->status == store::batch_status::finalizing)
              return error_response(error_kind::conflict,
                                    "batch '" + id + "' is " + store::to_string(b->status) + "; it cannot be cancelled",
                                    "batch_id");
            if (deps.batches->transition(id, b->status, store::batch_status::cancelling)) {
              if (deps.runner) deps.runner->wake();
              return json_response(200, batch_object(*deps.batches->get_batch(id, key.tenant)));
            }
          }
          return error_response(error_kind::conflict, "batch '" + id + "' changed state; retry", "batch_id");
        }));
}

}  // namespace agentq::api
