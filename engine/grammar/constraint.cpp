// Token-level constraint: walks a trie of the vocabulary with the byte matcher
// to find the allowed tokens, with a fast path inside JSON strings (most of the
// vocabulary is allowed there: precomputed masks by code-point count) and a
// per-state mask cache. Also the schema / tool-call grammar compilers + caches.
#include "grammar/constraint.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

#include "grammar/matcher.h"
#include "grammar/schema.h"
#include "json/json.h"

namespace agentq::grammar {

// ---------------------------------------------------------------------------
// vocabulary index

struct trie_node {
  uint8_t byte = 0;
  uint16_t depth = 0;        // 1 for children of the root
  int32_t skip = 0;          // index just past this node's subtree
  int32_t first_token = -1;  // tokens whose piece ends here (chained by next_token)
};

struct vocab_index {
  int32_t n_vocab = 0;
  std::vector<std::string> pieces;
  std::vector<token_id> eos_ids;
  std::vector<uint8_t> is_eos;
  std::vector<trie_node> trie;          // preorder
  std::vector<int32_t> next_token;      // chain of tokens sharing a trie node
  size_t max_depth = 0;
  // String fast path: tokens made only of plain string characters (complete
  // UTF-8, no '"', '\\' or control bytes), by code-point count.
  int32_t max_cps = 0;
  std::vector<std::vector<uint32_t>> plain_upto;   // [k]: plain tokens with <= k code points
  std::vector<token_id> other_tokens;              // non-empty, non-EOS, not plain
  size_t n_words() const { return (static_cast<size_t>(n_vocab) + 31) / 32; }
};

namespace {

// Code points if s is all plain string characters, else -1.
int32_t plain_code_points(const std::string& s) {
  int32_t n = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return -1;
      i++;
    } else {
      size_t len = 0;
      unsigned char lo = 0x80, hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) len = 2;
      else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
      else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
      else return -1;
      if (i + len > s.size()) return -1;
      unsigned char c1 = s[i + 1];
      if (c1 < lo || c1 > hi) return -1;
      for (size_t k = 2; k < len; k++) if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return -1;
      i += len;
    }
    n++;
  }
  return n;
}

}  // namespace

std::shared_ptr<const vocab_index> make_vocab_index(const std::vector<std::string>& pieces,
                                                    const std::vector<token_id>& eos_ids) {
  auto v = std::make_shared<vocab_index>();
  v->n_vocab = static_cast<int32_t>(pieces.size());
  v->pieces = pieces;
  v->eos_ids = eos_ids;
  v->is_eos.assign(pieces.size(), 0);
  for (token_id e : eos_ids) if (e >= 0 && e < v->n_vocab) v->is_eos[e] = 1;
  v->next_token.assign(pieces.size(), -1);

  std::vector<token_id> order;
  for (token_id t = 0; t < v->n_vocab; t++) if (!pieces[t].empty() && !v->is_eos[t]) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](token_id a, token_id b) {
    return pieces[a] != pieces[b] ? pieces[a] < pieces[b] : a < b;
  });
  // Build the preorder trie: path[d] = index of the node at depth d+1 on the current path.
  std::vector<int32_t> path;
  std::vector<int32_t> last_token_at;   // per node: tail of its token chain
  const std::string* prev = nullptr;
  for (token_id t : order) {
    const std::string& p = pieces[t];
    size_t lcp = 0;
    if (prev) while (lcp < p.size() && lcp < prev->size() && (*prev)[lcp] == p[lcp]) lcp++;
    while (path.size() > lcp) {
      v->trie[path.back()].skip = static_cast<int32_t>(v->trie.size());
      path.pop_back();
    }
    for (size_t d = path.size(); d < p.size(); d++) {
      trie_node n;
      n.byte = static_cast<uint8_t>(p[d]);
      n.depth = static_cast<uint16_t>(d + 1);
      path.push_back(static_cast<int32_t>(v->trie.size()));
      v->trie.push_back(n);
      last_token_at.push_back(-1);
    }
    int32_t node = path.back();
    if (v->trie[node].first_token < 0) v->trie[node].first_token = t;
    else v->next_token[last_token_at[node]] = t;
    last_token_at[node] = t;
    v->max_depth = std::max(v->max_depth, p.size());
    prev = &p;
  }
  while (!path.empty()) {
    v->trie[path.back()].skip = static_cast<int32_t>(v->trie.size());
    path.pop_back();
  }

  std::vector<int32_t> cps(pieces.size(), -1);
  for (token_id t : order) {
    cps[t] = plain_code_points(pieces[t]);
    if (cps[t] > v->max_cps) v->max_cps = cps[t];
    if (cps[t] < 0) v->other_tokens.push_back(t);
  }
  v->plain_upto.assign(v->max_cps + 1, std::vector<uint32_t>(v->n_words(), 0));
  for (token_id t : order) {
    if (cps[t] < 0) continue;
    v->plain_upto[cps[t]][t / 32] |= 1u << (t % 32);
  }
  for (int32_t k = 1; k <= v->max_cps; k++)
    for (size_t w = 0; w < v->n_words(); w++) v->plain_upto[k][w] |= v->plain_upto[k - 1][w];
  return v;
}

int32_t vocab_size(const vocab_index& v) { return v.n_vocab; }
const std::string& vocab_piece(const vocab_index& v, token_id id) {
  static const std::string none;
  return id >= 0 && id < v.n_vocab ? v.pieces[static_cast<size_t>(id)] : none;
}
const std::vector<token_id>& vocab_eos_ids(const vocab_index& v) { return v.eos_ids; }

// ---------------------------------------------------------------------------
// token_constraint

struct token_constraint::impl {
  std::shared_ptr<const grammar> g;
  std::shared_ptr<const vocab_index> vocab;
  matcher m;
  match_state state;
  std::vector<match_state> walk;   // per trie depth
  std::unordered_map<std::string, std::vector<uint32_t>> cache;
  std::string key_buf;
  bool eos_seen = false;

  impl(std::shared_ptr<const grammar> gr, std::shared_ptr<const vocab_index> v)
      : g(std::move(gr)), vocab(std::move(v)), m(*g) {
    state = m.initial();
    walk.resize(vocab->max_depth + 1);
  }

  // NOTE: a token is allowed iff it advances at least one stack, so the mask of
  // a multi-stack state (an ambiguous anyOf) is the union of per-stack masks;
  // computing them one by one lets each stack use the string fast path.
  void compute(std::vector<uint32_t>& mask) {
    if (state.stacks.size() <= 1) {
      compute_one(state, mask);
      return;
    }
    mask.assign(vocab->n_words(), 0);
    std::vector<uint32_t> part;
    match_state one;
    for (const auto& st : state.stacks) {
      one.stacks.assign(1, st);
      compute_one(one, part);
      for (size_t w = 0; w < mask.size(); w++) mask[w] |= part[w];
    }
  }

  void compute_one(const match_state& state, std::vector<uint32_t>& mask) {
    const vocab_index& v = *vocab;
    int64_t remaining;
    if (m.in_plain_string(state, &remaining)) {
      int64_t k = remaining < 0 ? v.max_cps : std::min<int64_t>(remaining, v.max_cps);
      mask = v.plain_upto[k];
      match_state tmp;
      for (token_id t : v.other_tokens) {
        tmp = state;
        if (m.advance_bytes(tmp, v.pieces[t])) mask[t / 32] |= 1u << (t % 32);
      }
      return;
    }
    mask.assign(v.n_words(), 0);
    walk[0] = state;
    const auto& trie = v.trie;
    for (size_t i = 0; i < trie.size();) {
      const trie_node& n = trie[i];
      if (!m.advance(walk[n.depth - 1], n.byte, walk[n.depth])) {
        i = n.skip;
        continue;
      }
      for (int32_t t = n.first_token; t >= 0; t = v.next_token[t]) mask[t / 32] |= 1u << (t % 32);
      i++;
    }
  }
};

token_constraint::token_constraint(std::shared_ptr<const grammar> g, std::shared_ptr<const vocab_index> vocab)
    : impl_(std::make_unique<impl>(std::move(g), std::move(vocab))) {}
token_constraint::~token_constraint() = default;

int32_t token_constraint::n_vocab() const { return impl_->vocab->n_vocab; }

void token_constraint::fill_mask(std::vector<uint32_t>& mask) {
  impl& s = *impl_;
  if (s.eos_seen) {
    mask.assign(s.vocab->n_words(), 0);
    return;
  }
  s.key_buf.clear();
  s.m.key(s.state, s.key_buf);
  auto it = s.cache.find(s.key_buf);
  if (it != s.cache.end()) {
    mask = it->second;
  } else {
    s.compute(mask);
    if (s.cache.size() >= 4096) s.cache.clear();
    s.cache.emplace(s.key_buf, mask);
  }
  if (s.m.can_finish(s.state))
    for (token_id e : s.vocab->eos_ids) if (e >= 0 && e < s.vocab->n_vocab) mask[e / 32] |= 1u << (e % 32);
}

bool token_constraint::accept(token_id id) {
  impl& s = *impl_;
  if (id < 0 || id >= s.vocab->n_vocab || s.eos_seen) return false;
  if (s.vocab->is_eos[id]) {
    if (!s.m.can_finish(s.state)) return false;
    s.eos_seen = true;
    return true;
  }
  const std::string& p = s.vocab->pieces[id];
  if (p.empty()) return false;
  return accept_bytes(p);
}

bool token_constraint::accept_bytes(std::string_view bytes) {
  impl& s = *impl_;
  match_state next = s.state;
  if (!s.m.advance_bytes(next, bytes)) return false;
  s.state = std::move(next);
  return true;
}

bool token_constraint::is_complete() const { return impl_->eos_seen || impl_->m.can_finish(impl_->state); }

bool token_constraint::is_finished() const {
  const impl& s = *impl_;
  if (s.eos_seen) return true;
  if (!s.m.can_finish(s.state)) return false;
  match_state next;
  for (int b = 0; b < 256; b++)
    if (s.m.advance(s.state, static_cast<uint8_t>(b), next)) return false;
  return true;
}

// ---------------------------------------------------------------------------
// compilation + caches

namespace {

std::mutex cache_mutex;
std::map<std::string, std::shared_ptr<const grammar>, std::less<>> schema_cache;
std::map<std::string, std::shared_ptr<const grammar>, std::less<>> tool_cache;

}  // namespace

compile_result compile_schema(std::string_view schema_json, json_whitespace ws) {
  const std::string key = std::string(ws == json_whitespace::free ? "f|" : "s|") + std::string(schema_json);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = schema_cache.find(key);
    if (it != schema_cache.end()) return {it->second, {}};
  }
  compile_result r;
  std::string err;
  auto s = parse_schema(schema_json, &err);
  if (!s) {
    r.error = err;
    return r;
  }
  try {
    r.value = std::make_shared<const grammar>(make_json_grammar(*s, ws));
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (schema_cache.size() >= 256) schema_cache.clear();
  schema_cache.emplace(key, r.value);
  return r;
}

std::vector<std::string> validate_json(std::string_view schema_json, std::string_view value_json) {
  std::string err;
  auto s = parse_schema(schema_json, &err);
  if (!s) return {"schema: " + err};
  auto v = json::parse(value_json, &err);
  if (!v) return {err};
  return validate(*s, *v);
}

compile_result compile_tool_call_grammar(chat::template_family family, const std::vector<tool_def>& tools,
                                         const tool_choice& choice, bool parallel_tool_calls, json_whitespace ws) {
  compile_result r;
  if (choice.mode == tool_choice_mode::none) {
    r.error = "tool_choice is none: no tool call grammar";
    return r;
  }
  std::string key = std::string(chat::to_string(family)) + "|" + std::to_string(int(choice.mode)) + "|" + choice.name +
                    "|" + (parallel_tool_calls ? "p" : "s") + "|" + (ws == json_whitespace::free ? "f" : "s") + "|" +
                    chat::tools_json(tools);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = tool_cache.find(key);
    if (it != tool_cache.end()) return {it->second, {}};
  }
  auto g = std::make_shared<grammar>();
  g->ws = ws;
  try {
    const char* args_key = family == chat::template_family::llama3 ? "parameters" : "arguments";
    std::vector<int32_t> calls;
    const bool harmony = family == chat::template_family::harmony;
    for (const auto& t : tools) {
      if (choice.mode == tool_choice_mode::named && t.name != choice.name) continue;
      std::string err;
      std::string params = t.parameters_json.empty() ? "{\"type\":\"object\"}" : t.parameters_json;
      auto s = parse_schema(params, &err);
      if (!s) throw std::runtime_error("tool '" + t.name + "': " + err);
      int32_t args;
      try {
        args = compile_schema_into(*g, *s);
      } catch (const std::exception& e) {
        throw std::runtime_error("tool '" + t.name + "': " + e.what());
      }
      if (harmony) {  // NAME <|constrain|>json<|message|>{arguments}: the name is the recipient
        gnode s;
        s.kind = gkind::seq;
        s.children = {g->literal(t.name + " <|constrain|>json<|message|>"), args};
        calls.push_back(g->add(std::move(s)));
        continue;
      }
      std::string name_lit;
      json::append_quoted(name_lit, t.name);
      gnode obj;
      obj.kind = gkind::object;
      obj.ordered = true;
      obj.props = {{"name", g->literal(name_lit), true}, {args_key, args, true}};
      obj.required_mask = 3;
      if (family == chat::template_family::mistral) {
        // NOTE: Mistral's template prints each call's 9-character "id" after the arguments, so a
        // model may write one: allowed (optional; the parser keeps a 9-character id).
        gnode id;
        id.kind = gkind::string;
        id.min_len = id.max_len = 9;
        obj.props.push_back({"id", g->add(std::move(id)), false});
      }
      calls.push_back(g->add(std::move(obj)));
    }
    if (calls.empty())
      throw std::runtime_error(choice.mode == tool_choice_mode::named ? "tool_choice names unknown tool '" + choice.name + "'"
                                                                     : "no tools to call");
    int32_t call = calls[0];
    if (calls.size() > 1) {
      gnode a;
      a.kind = gkind::alt;
      a.children = calls;
      call = g->add(std::move(a));
    }
    auto seq = [&](std::vector<int32_t> ch) {
      gnode s;
      s.kind = gkind::seq;
      s.children = std::move(ch);
      return g->add(std::move(s));
    };
    auto repeat = [&](int32_t child, const char* sep) {
      gnode rp;
      rp.kind = gkind::repeat;
      rp.child = child;
      rp.sep = g->literal(sep);
      rp.min_rep = 1;
      rp.max_rep = parallel_tool_calls ? 16 : 1;
      return g->add(std::move(rp));
    };
    using tf = chat::template_family;
    switch (family) {
      case tf::llama3: g->root = seq({repeat(call, "; ")}); break;
      case tf::harmony:
      {
        // One call per message, ended by <|call|> (which ends the turn): see chat/tool_parser.cpp.
        // NOTE: the closing <|call|> is optional: in the real vocabulary it is an end-of-generation
        // token, which a complete grammar allows as such (the parser does not need it).
        gnode end;
        end.kind = gkind::alt;
        end.children = {g->literal("<|call|>"), g->literal("")};
        g->root = seq({g->literal(chat::traits(family).tool_call_open), call, g->add(std::move(end))});
        break;
      }
      case tf::mistral: {
        // NOTE: [TOOL_CALLS] is a control token in Mistral vocabularies, whose piece is "" (never
        // text), so the marker is optional here; the parser accepts a bare call array too.
        gnode marker;
        marker.kind = gkind::alt;
        marker.children = {g->literal("[TOOL_CALLS]"), g->literal("")};
        g->root = seq({g->add(std::move(marker)), g->literal("["), repeat(call, ", "), g->literal("]")});
        break;
      }
      case tf::plain:
      default: {
        const bool plain = family == tf::plain;
        const int32_t block = seq({g->literal(plain ? "<tool_call>" : "<tool_call>\n"), call,
                                   g->literal(plain ? "</tool_call>" : "\n</tool_call>")});
        // NOTE: with parallel calls the "\n" after a call may also be the last byte: were it
        // only the separator, a model fond of whitespace would be forced into another call
        // after every "\n" (a required turn once ran to 1,000 tokens that way).
        gnode tail;
        tail.kind = gkind::alt;
        tail.children = {g->literal("\n"), g->literal("")};
        g->root = parallel_tool_calls ? seq({repeat(block, "\n"), g->add(std::move(tail))}) : seq({repeat(block, "\n")});
        break;
      }
    }
    g->description = "tool calls (" + std::string(chat::to_string(family)) + ")";
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  r.value = g;
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (tool_cache.size() >= 256) tool_cache.clear();
  tool_cache.emplace(key, r.value);
  return r;
}

std::unique_ptr<token_constraint> make_json_constraint(std::string_view schema_json,
                                                       std::shared_ptr<const vocab_index> vocab, std::string* error,
                                                       json_whitespace ws) {
  compile_result r = compile_schema(schema_json, ws);
  if (!r.value) {
    if (error) *error = r.error;
    return nullptr;
  }
  return std::make_unique<token_constraint>(r.value, std::move(vocab));
}

std::unique_ptr<token_constraint> make_json_constraint(std::string_view schema_json,
                                                       const std::vector<std::string>& pieces,
                                                       const std::vector<token_id>& eos_ids, std::string* error) {
  return make_json_constraint(schema_json, make_vocab_index(pieces, eos_ids), error);
}

std::unique_ptr<token_constraint> make_tool_call_constraint(chat::template_family family,
                                                            const std::vector<tool_def>& tools,
                                                            const tool_choice& choice, bool parallel_tool_calls,
                                                            std::shared_ptr<const vocab_index> vocab,
                                                            std::string* error, json_whitespace ws) {
  compile_result r = compile_tool_call_grammar(family, tools, choice, parallel_tool_calls, ws);
  if (!r.value) {
    if (error) *error = r.error;
    return nullptr;
  }
  return std::make_unique<token_constraint>(r.value, std::move(vocab));
}

}  // namespace agentq::grammar
