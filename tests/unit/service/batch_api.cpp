// The Batch API's input parsers and refusals (issue 29): the streaming multipart parser gives the
// same parts however the bytes are split; the JSONL checker names the line and field of each bad
// line; over the real routes (router, SQLite store, key store), bad uploads and batch requests are
// 400 JSON bodies, a file is visible to its tenant only, and a good file becomes a validating batch.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <mutex>
#include <set>
#include <thread>

#include "api/api.h"
#include "api/batch_input.h"
#include "api/model_catalog.h"
#include "auth/keys.h"
#include "net/ssrf_guard.h"
#include "store/batch_store.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

struct fake_catalog : api::model_catalog {
  std::vector<api::model_info> list() const override { return {{"tiny", "llama", 64, true}}; }
  std::optional<std::string> validate(const std::string&, const turn_request& r) const override {
    size_t n = 0;
    for (const auto& m : r.messages) n += m.content.size();
    if (n > 200) return "messages: the prompt is over the model's context of 64";
    return std::nullopt;
  }
};

std::string multipart(const std::string& boundary, const std::string& purpose, const std::string& file) {
  std::string b = "--" + boundary + "\r\n";
  b += "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose + "\r\n";
  b += "--" + boundary + "\r\n";
  b += "Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n";
  b += file + "\r\n--" + boundary + "--\r\n";
  return b;
}

std::string chat_line(const std::string& id, const std::string& text = "hi") {
  return json{{"custom_id", id},
              {"method", "POST"},
              {"url", "/v1/chat/completions"},
              {"body", {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}}}}
      .dump();
}

struct parts_seen {
  std::vector<std::pair<std::string, std::string>> parts;  // (name, data)
};

bool parse_split(const std::string& body, const std::string& boundary, size_t piece, parts_seen* out, std::string* err) {
  api::multipart_parser p(boundary, {[&](const std::string& name, const std::string&) {
                                       out->parts.emplace_back(name, "");
                                       return true;
                                     },
                                     [&](std::string_view d) {
                                       out->parts.back().second.append(d);
                                       return true;
                                     },
                                     [] { return true; }});
  for (size_t i = 0; i < body.size(); i += piece)
    if (!p.feed(std::string_view(body).substr(i, piece))) break;
  bool ok = p.finish();
  *err = p.error();
  return ok;
}

}  // namespace

TEST_CASE("multipart: the same parts whatever the read sizes") {
  std::string file = chat_line("a") + "\n" + chat_line("b") + "\n\r\n--not-the-boundary\r\n";
  std::string body = multipart("XyZ123", "batch", file);
  for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(64), body.size()}) {
    parts_seen seen;
    std::string err;
    REQUIRE_MESSAGE(parse_split(body, "XyZ123", piece, &seen, &err), err);
    REQUIRE(seen.parts.size() == 2);
    CHECK(seen.parts[0] == std::pair<std::string, std::string>{"purpose", "batch"});
    CHECK(seen.parts[1].first == "file");
    CHECK(seen.parts[1].second == file);
  }
  parts_seen seen;
  std::string err;
  CHECK_FALSE(parse_split(body.substr(0, body.size() - 10), "XyZ123", 5, &seen, &err));
  CHECK(err.find("closing boundary") != std::string::npos);
  CHECK_FALSE(parse_split("--XyZ123\r\nX-No-Colon\r\n\r\nbody\r\n--XyZ123--", "XyZ123", 4, &seen, &err));
  CHECK(api::multipart_boundary("multipart/form-data; boundary=\"abc\"") == "abc");
  CHECK(api::multipart_boundary("multipart/form-data; charset=utf-8; boundary=abc") == "abc");
  CHECK_FALSE(api::multipart_boundary("application/json"));
  CHECK_FALSE(api::multipart_boundary("multipart/form-data"));
}

TEST_CASE("jsonl: each bad line is refused with its number and field") {
  auto check = [](const std::string& text) {
    api::jsonl_checker c(1024, nullptr);
    bool ok = c.feed(text) && c.finish();
    return std::tuple{ok, c.error_line(), c.error_param(), c.error()};
  };
  std::string good = chat_line("a") + "\n" + chat_line("b") + "\n\n";
  CHECK(std::get<0>(check(good)));
  auto [ok1, line1, param1, msg1] = check(chat_line("a") + "\n{not json\n");
  CHECK_FALSE(ok1);
  CHECK(line1 == 2);
  CHECK(msg1.starts_with("line 2: "));
  auto [ok2, line2, param2, msg2] = check(chat_line("a") + "\n" + chat_line("a") + "\n");
  CHECK(line2 == 2);
  CHECK(param2 == "custom_id");
  json bad = json::parse(chat_line("c"));
  bad["method"] = "GET";
  CHECK(std::get<2>(check(bad.dump())) == "method");
  bad = json::parse(chat_line("c"));
  bad["url"] = "/v1/embeddings";
  CHECK(std::get<2>(check(bad.dump())) == "url");
  bad = json::parse(chat_line("c"));
  bad["url"] = "/v1/responses";
  CHECK(std::get<2>(check(chat_line("a") + "\n" + bad.dump())) == "url");  // one endpoint per file
  bad = json::parse(chat_line("c"));
  bad.erase("custom_id");
  CHECK(std::get<2>(check(bad.dump())) == "custom_id");
  bad = json::parse(chat_line("c"));
  bad["extra"] = 1;
  CHECK(std::get<2>(check(bad.dump())) == "extra");
  CHECK(std::get<3>(check(chat_line("a", std::string(2000, 'x')))).find("longer than 1024") != std::string::npos);
  CHECK_FALSE(std::get<0>(check("\n\n")));  // no requests at all
}

// Lines are checked in groups by two threads (jsonl_checker's note); the verdict is the first bad
// line's, in line order, whatever the group boundaries, the pieces the file is fed in, and the
// errors of later lines (a parse error, a duplicate, a refusal of on_line, a line too long).
TEST_CASE("jsonl: in groups on two threads, the first bad line in line order is the verdict") {
  const int n = 1500;
  auto file = [&](int bad_at, const std::string& bad, int dup_at, int long_at) {
    std::string f;
    for (int i = 1; i <= n; ++i) {
      if (i == bad_at) f += bad;
      else if (i == dup_at) f += chat_line("r1");
      else if (i == long_at) f += chat_line("r" + std::to_string(i), std::string(3000, 'x'));
      else f += chat_line("r" + std::to_string(i));
      f += i % 97 == 0 ? "\r\n\n" : "\n";  // CRLF and blank lines too
    }
    return f;
  };
  struct verdict {
    bool ok;
    int64_t line, n_requests;
    std::string error, param;
    bool operator==(const verdict&) const = default;
  };
  std::mutex mu;
  std::set<std::thread::id> threads;
  auto run = [&](const std::string& text, size_t piece, int refuse_at) {
    api::jsonl_checker c(2048, [&](int64_t line_no, std::string_view, api::batch_request_line&, std::string* param,
                                   std::string*)
                                   -> std::optional<std::string> {
      {
        std::lock_guard lock(mu);
        threads.insert(std::this_thread::get_id());
      }
      if (line_no != refuse_at) return std::nullopt;
      *param = "body.model";
      return "refused here";
    });
    bool ok = true;
    for (size_t i = 0; ok && i < text.size(); i += piece) ok = c.feed(std::string_view(text).substr(i, piece));
    ok = ok && c.finish();
    return verdict{ok, c.error_line(), c.n_requests(), c.error(), c.error_param()};
  };
  auto all_ways = [&](const std::string& text, int refuse_at) {
    verdict v = run(text, text.size(), refuse_at);
    for (size_t piece : {1u << 20, 4096u, 777u, 100u}) CHECK(run(text, piece, refuse_at) == v);
    return v;
  };
  verdict good = all_ways(file(0, "", 0, 0), -1);
  CHECK(good.ok);
  CHECK(good.n_requests == n);
  threads.clear();
  run(file(0, "", 0, 0), 4096, -1);
  CHECK(threads.size() == 2);  // the caller and its aq-upload-check
  // Line numbers count blank lines: line i of the loop is line i + (i - 1) / 97 of the file.
  auto line_of = [](int i) { return int64_t(i + (i - 1) / 97); };
  verdict parse = all_ways(file(700, "{not json", 1200, 1300), int(line_of(900)));
  CHECK(parse.line == line_of(700));
  CHECK(parse.error.starts_with("line " + std::to_string(line_of(700)) + ": "));
  verdict refused = all_ways(file(0, "", 1200, 1300), int(line_of(900)));
  CHECK(refused.line == line_of(900));
  CHECK(refused.param == "body.model");
  CHECK(refused.error == "line " + std::to_string(line_of(900)) + ": refused here");
  verdict dup = all_ways(file(0, "", 1200, 1300), -1);
  CHECK(dup.line == line_of(1200));
  CHECK(dup.param == "custom_id");
  verdict too_long = all_ways(file(0, "", 0, 1300), -1);
  CHECK(too_long.line == line_of(1300));
  CHECK(too_long.error.find("longer than 2048") != std::string::npos);
  CHECK(too_long.n_requests == 1300 - 1);
}

TEST_CASE("routes: bad uploads and batch requests are 400 JSON bodies; files are tenant-scoped") {
  test::temp_dir dir;
  std::string err;
  std::string db = dir.file("agentq.db");
  store::store_options so;
  so.path = db;
  auto st = store::store::open(so, &err);
  REQUIRE_MESSAGE(st, err);
  auto keys = auth::key_store::open(db, &err);
  REQUIRE(keys);
  auto batches = store::batch_store::open(db, &err);
  REQUIRE(batches);
  std::filesystem::create_directories(dir.path() / "files");
  fake_catalog cat;
  net::ssrf_guard guard(std::vector<net::cidr>{});
  api::api_deps deps;
  deps.store = st.get();
  deps.keys = keys.get();
  deps.catalog = &cat;
  deps.guard = &guard;
  deps.batches = batches.get();
  deps.files_dir = (dir.path() / "files").string();
  deps.db_path = db;
  api::api a({}, deps);
  http::router r;
  a.install(r);
  auto key_a = keys->create("tenant-a", false, &err);
  auto key_b = keys->create("tenant-b", false, &err);
  REQUIRE(key_a);
  REQUIRE(key_b);

  auto call = [&](const std::string& method, const std::string& target, const std::string& body,
                  const std::string& content_type, const std::string& key) {
    http::request req;
    req.method = method;
    req.target = target;
    req.path = target.substr(0, target.find('?'));
    if (target.find('?') != std::string::npos) req.query = target.substr(target.find('?') + 1);
    req.headers = {{"authorization", "Bearer " + key}, {"content-type", content_type}};
    req.body = body;
    auto res = r.dispatch(req);
    return std::pair{res.status, json::parse(res.body, nullptr, false)};
  };
  const std::string mp = "multipart/form-data; boundary=B0und";
  auto upload = [&](const std::string& purpose, const std::string& file, const std::string& key) {
    return call("POST", "/v1/files", multipart("B0und", purpose, file), mp, key);
  };

  // refusals: status 400 and {"error":{"type","message","param"}}
  auto [s1, b1] = upload("batch", chat_line("a") + "\n" + chat_line("a"), key_a->key);
  CHECK(s1 == 400);
  CHECK(b1["error"]["type"] == "invalid_request_error");
  CHECK(b1["error"]["message"].get<std::string>().starts_with("line 2: "));
  CHECK(b1["error"]["param"] == "file.custom_id");
  auto [s2, b2] = upload("batch", chat_line("a", std::string(300, 'x')), key_a->key);  // over the context
  CHECK(s2 == 400);
  CHECK(b2["error"]["message"].get<std::string>().starts_with("line 1: "));
  CHECK(b2["error"]["param"].get<std::string>().starts_with("file.body"));
  json unknown_model = json::parse(chat_line("a"));
  unknown_model["body"]["model"] = "gpt-9";
  auto [s3, b3] = upload("batch", unknown_model.dump(), key_a->key);
  CHECK(s3 == 400);
  CHECK(b3["error"]["param"] == "file.body.model");
  auto [s4, b4] = upload("fine-tune", chat_line("a"), key_a->key);
  CHECK(s4 == 400);
  CHECK(b4["error"]["param"] == "purpose");
  auto [s5, b5] = call("POST", "/v1/files", chat_line("a"), "application/json", key_a->key);
  CHECK(s5 == 400);
  CHECK(b5["error"]["param"] == "Content-Type");

  // a good file: tenant a sees it, tenant b does not
  auto [s6, f] = upload("batch", chat_line("a") + "\n" + chat_line("b") + "\n", key_a->key);
  REQUIRE(s6 == 200);
  CHECK(f["object"] == "file");
  CHECK(f["purpose"] == "batch");
  std::string file_id = f["id"];
  CHECK(call("GET", "/v1/files/" + file_id, "", "", key_a->key).first == 200);
  CHECK(call("GET", "/v1/files/" + file_id, "", "", key_b->key).first == 404);
  CHECK(call("GET", "/v1/files/" + file_id + "/content", "", "", key_b->key).first == 404);
  CHECK(call("DELETE", "/v1/files/" + file_id, "", "", key_b->key).first == 404);

  json batch = {{"input_file_id", file_id}, {"endpoint", "/v1/chat/completions"}, {"completion_window", "24h"}};
  auto bad_batch = [&](const char* field, json value, const std::string& key) {
    json b = batch;
    b[field] = std::move(value);
    return call("POST", "/v1/batches", b.dump(), "application/json", key);
  };
  auto [s7, b7] = bad_batch("completion_window", "1h", key_a->key);
  CHECK(s7 == 400);
  CHECK(b7["error"]["param"] == "completion_window");
  CHECK(bad_batch("endpoint", "/v1/embeddings", key_a->key).second["error"]["param"] == "endpoint");
  CHECK(bad_batch("endpoint", "/v1/responses", key_a->key).second["error"]["param"] == "endpoint");  // file's url
  CHECK(bad_batch("metadata", json{{"k", 1}}, key_a->key).second["error"]["param"] == "metadata.k");
  CHECK(bad_batch("input_file_id", file_id, key_b->key).first == 404);  // another tenant's file
  CHECK(bad_batch("bogus", 1, key_a->key).second["error"]["param"] == "bogus");

  auto [s8, made] = call("POST", "/v1/batches", batch.dump(), "application/json", key_a->key);
  REQUIRE(s8 == 200);
  CHECK(made["object"] == "batch");
  CHECK(made["status"] == "validating");
  CHECK(made["request_counts"]["total"] == 2);
  std::string batch_id = made["id"];
  CHECK(call("GET", "/v1/batches/" + batch_id, "", "", key_b->key).first == 404);
  CHECK(call("POST", "/v1/batches/" + batch_id + "/cancel", "", "", key_b->key).first == 404);
  auto [s9, list] = call("GET", "/v1/batches?limit=1", "", "", key_a->key);
  CHECK(s9 == 200);
  CHECK(list["data"].size() == 1);
  CHECK(call("GET", "/v1/batches", "", "", key_b->key).second["data"].empty());
  auto [s10, cancelled] = call("POST", "/v1/batches/" + batch_id + "/cancel", "", "", key_a->key);
  CHECK(s10 == 200);
  CHECK(cancelled["status"] == "cancelling");
  CHECK(call("DELETE", "/v1/files/" + file_id, "", "", key_a->key).first == 200);
  CHECK(call("GET", "/v1/files/" + file_id, "", "", key_a->key).first == 404);

  // GET /v1/usage: a page of daily buckets; bad parameters are 400s naming them
  CHECK(call("GET", "/v1/usage", "", "", key_a->key).second["error"]["param"] == "start");
  CHECK(call("GET", "/v1/usage?start=0&group_by=user", "", "", key_a->key).second["error"]["param"] == "group_by");
  auto [s11, usage] = call("GET", "/v1/usage?start=0&end=172800&group_by=key,model", "", "", key_a->key);
  CHECK(s11 == 200);
  CHECK(usage["object"] == "page");
  REQUIRE(usage["data"].size() == 2);
  CHECK(usage["data"][1]["start_time"] == 86400);
  CHECK(usage["data"][0]["results"].empty());
}
