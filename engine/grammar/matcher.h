// Byte-level pushdown matcher for JSON values constrained by a schema (and the
// literal wrappers of tool-call formats). A grammar is a graph of nodes; the
// matcher state is a small set of stacks of fixed-size frames (more than one
// only while an anyOf / repeat is ambiguous), advanced one byte at a time.
// NOTE: generation may be narrower than the schema (documented in matcher.cpp):
// what the matcher accepts always validates, never the other way round.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agentq/engine.h"
#include "grammar/schema.h"

namespace agentq::grammar {

enum class gkind : uint8_t { never, literal, string, number, array, object, alt, seq, repeat, ws };

struct gprop {
  std::string key_text;   // JSON-escaped property name, no quotes
  int32_t value = -1;     // node
  bool required = false;
};

struct gnode {
  gkind kind = gkind::never;
  std::string text;                    // literal
  int64_t min_len = 0, max_len = -1;   // string: code points
  bool integer = false;                // number
  bool has_lo = false, has_hi = false, lo_excl = false, hi_excl = false;
  double lo = 0, hi = 0;
  int32_t item = -1;                   // array: item node
  int64_t min_items = 0, max_items = -1;
  std::vector<gprop> props;            // object (declared keys, <= 64)
  uint64_t required_mask = 0;
  bool ordered = false;                // object: keys in declaration order
  int32_t free_value = -1;             // object: >= 0 → any keys, values of this node
  std::vector<int32_t> children;       // alt, seq
  int32_t child = -1, sep = -1;        // repeat
  int64_t min_rep = 1, max_rep = 1;    // repeat
};

struct grammar {
  std::vector<gnode> nodes;
  int32_t root = -1;
  json_whitespace ws = json_whitespace::spaced;  // spaced: ": " and ", " only; free: max_ws per gap
  int32_t max_ws = 16;                 // free: longest whitespace run in a JSON gap (bytes)
  int32_t max_ws_node = 16;            // longest run a gkind::ws node takes (leading whitespace)
  int32_t max_depth = 48;              // frames per stack
  int32_t any_node = -1;               // cached "any JSON value"
  int32_t key_node = -1;               // free-form key string
  std::string description;             // schema text or "tool calls: ..."

  int32_t add(gnode n) {
    nodes.push_back(std::move(n));
    return static_cast<int32_t>(nodes.size() - 1);
  }
  int32_t literal(std::string text);
  int32_t any();                       // any JSON value (depth-limited at match time)
};

// Compile a parsed schema into g (appending nodes); returns the value node.
// Throws std::runtime_error on schemas the grammar cannot express.
int32_t compile_schema_into(grammar& g, const schema& s);
// A grammar for one JSON value of the schema, with optional leading whitespace (at most 2
// bytes when spaced: a newline or two before the value, never a run of padding).
grammar make_json_grammar(const schema& s, json_whitespace ws = json_whitespace::spaced);

struct frame {
  int32_t node = 0;
  uint8_t phase = 0;
  uint8_t ws = 0;          // whitespace bytes in the current gap
  uint16_t pos = 0;        // literal / key position; number exponent digits
  uint32_t count = 0;      // string code points; array items; seq / repeat index; number int digits
  uint32_t aux = 0;        // object: selected prop / ordered cursor; string: utf8 bytes pending; number frac digits
  uint32_t pad = 0;
  uint64_t mask = 0;       // object: seen props; number: flags
  uint64_t mask2 = 0;      // object: key candidates; string: next utf8 byte range
  double num = 0;          // number: |value| so far
};
static_assert(sizeof(frame) == 48);

using stack = std::vector<frame>;

// A matcher state: the live stacks (empty = dead). A stack that is itself
// empty has matched a complete value.
struct match_state {
  std::vector<stack> stacks;
  bool dead() const { return stacks.empty(); }
};

class matcher {
 public:
  explicit matcher(const grammar& g) : g_(g) {}
  match_state initial() const;
  // Advance by one byte into out (out may alias nothing in s); returns !out.dead().
  bool advance(const match_state& s, uint8_t b, match_state& out) const;
  bool advance_bytes(match_state& s, std::string_view bytes) const;
  // The input so far is a complete value.
  bool can_finish(const match_state& s) const;
  // Append a canonical byte key of s (for caches).
  void key(const match_state& s, std::string& out) const;
  const grammar& g() const { return g_; }

  // String fast path: s is one stack whose top is a string body with no pending
  // escape or UTF-8 bytes; *remaining = code points still allowed (-1 = unbounded).
  bool in_plain_string(const match_state& s, int64_t* remaining) const;

 private:
  enum class step { consumed, reject, pass_up, forked };
  void feed(stack st, uint8_t b, std::vector<stack>& out) const;
  void start(stack& st, int32_t node, uint8_t b, std::vector<stack>& out) const;
  step step_frame(stack& st, uint8_t b, std::vector<stack>& out) const;
  void on_child_done(frame& parent) const;
  bool frame_can_end(const frame& f) const;
  uint64_t key_candidates(const frame& f, const gnode& n) const;

  const grammar& g_;
};

}  // namespace agentq::grammar
