// Byte-level pushdown matcher (see matcher.h) and the schema → grammar compiler.
//
// Where generation is narrower than the schema (all deliberate, all still valid):
//  * objects with declared properties never get extra keys, even when
//    additionalProperties allows them; an object without properties takes any keys;
//  * numbers: at most 15 integer digits, 9 fraction digits, 2 exponent digits, and
//    no exponent when the schema bounds the value; "-0" and leading zeros follow JSON;
//  * \u escapes never produce surrogates; raw bytes must be valid UTF-8;
//  * whitespace (grammar::ws): spaced (the default) takes at most one space after ':'
//    and ',' and none elsewhere (the chat templates' tojson prints exactly that); free takes
//    runs of at most grammar::max_ws bytes in every gap; no whitespace after the root
//    value (end of output) either way;
//  * enum/const values are produced in compact canonical form;
//  * "any" values nest at most grammar::max_depth frames deep; keys of free-form
//    objects are not checked for duplicates.
#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

namespace agentq::grammar {

namespace {

enum : uint8_t { S_OPEN, S_BODY, S_ESC, S_HEX, S_UTF8, S_DONE };
enum : uint8_t { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum : uint8_t { A_OPEN, A_FIRST, A_ITEM, A_AFTER, A_COMMA, A_DONE };
enum : uint8_t { O_OPEN, O_FIRST, O_KEY, O_FREEKEY, O_COLON, O_GAP, O_VALUE, O_AFTER, O_COMMA, O_DONE };
enum : uint8_t { R_START, R_CHILD, R_AFTER, R_SEP };

constexpr uint32_t max_int_digits = 15, max_frac_digits = 9, max_exp_digits = 2;

bool is_ws(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// Does the signed interval [a, b] meet the node's bounds?
bool meets(const gnode& n, double a, double b) {
  if (n.has_hi && (n.hi_excl ? a >= n.hi : a > n.hi)) return false;
  if (n.has_lo && (n.lo_excl ? b <= n.lo : b < n.lo)) return false;
  return true;
}
bool abs_meets(const gnode& n, bool negative, double a, double b) {
  return negative ? meets(n, -b, -a) : meets(n, a, b);
}
double pow10i(int k) {
  static const double p[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16};
  return k >= 0 && k <= 16 ? p[k] : std::pow(10.0, k);
}

// Can a number with this prefix still end inside the bounds?
bool number_feasible(const gnode& n, const frame& f) {
  if (!n.has_lo && !n.has_hi) return true;
  bool neg = f.mask & 1;
  constexpr double open = 1e-12;   // shrink right-open ends
  switch (f.phase) {
    case N_START:
    case N_MINUS: return abs_meets(n, neg, 0, pow10i(max_int_digits));
    case N_ZERO: return n.integer ? abs_meets(n, neg, 0, 0) : abs_meets(n, neg, 0, 1 - open);
    case N_INT: {
      double v = f.num;
      for (uint32_t k = 0; f.count + k <= max_int_digits; k++) {
        double a = v * pow10i(k), w = pow10i(k);
        if (n.integer ? abs_meets(n, neg, a, a + w - 1) : abs_meets(n, neg, a, a + w - open * w)) return true;
      }
      return false;
    }
    case N_DOT:
    case N_FRAC: {
      if (f.aux >= max_frac_digits) return abs_meets(n, neg, f.num, f.num);
      double w = pow10i(-static_cast<int>(f.aux));
      return abs_meets(n, neg, f.num, f.num + w * (1 - open));
    }
    default: return true;
  }
}

bool number_can_end(const gnode& n, const frame& f) {
  if (f.phase != N_ZERO && f.phase != N_INT && f.phase != N_FRAC && f.phase != N_EXP) return false;
  if (f.phase == N_EXP || (!n.has_lo && !n.has_hi)) return true;
  double v = (f.mask & 1) ? -f.num : f.num;
  return meets(n, v, v);
}

bool nullable(const grammar& g, int32_t node, int depth = 0) {
  if (depth > 32) return false;
  const gnode& n = g.nodes[node];
  switch (n.kind) {
    case gkind::ws: return true;
    case gkind::literal: return n.text.empty();
    case gkind::repeat: return n.min_rep == 0;
    case gkind::seq:
      for (int32_t c : n.children) if (!nullable(g, c, depth + 1)) return false;
      return true;
    case gkind::alt:
      for (int32_t c : n.children) if (nullable(g, c, depth + 1)) return true;
      return false;
    default: return false;
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// grammar helpers

int32_t grammar::literal(std::string t) {
  gnode n;
  n.kind = gkind::literal;
  n.text = std::move(t);
  return add(std::move(n));
}

int32_t grammar::any() {
  if (any_node >= 0) return any_node;
  gnode alt;
  alt.kind = gkind::alt;
  any_node = add(alt);
  if (key_node < 0) {
    gnode k;
    k.kind = gkind::string;
    key_node = add(k);
  }
  gnode obj;
  obj.kind = gkind::object;
  obj.free_value = any_node;
  gnode arr;
  arr.kind = gkind::array;
  arr.item = any_node;
  gnode str;
  str.kind = gkind::string;
  gnode num;
  num.kind = gkind::number;
  std::vector<int32_t> ch = {add(obj), add(arr), add(str), add(num), literal("true"), literal("false"), literal("null")};
  nodes[any_node].children = std::move(ch);
  return any_node;
}

namespace {

class compiler {
 public:
  compiler(grammar& g, const schema& s) : g_(g), s_(s) {}

  int32_t compile(int32_t idx, int depth) {
    if (depth > 64) throw std::runtime_error("schema nested too deeply");
    if (auto it = memo_.find(idx); it != memo_.end()) return it->second;
    int32_t r = compile_uncached(idx, depth);
    memo_[idx] = r;
    return r;
  }

 private:
  int32_t alt_of(std::vector<int32_t> ch) {
    if (ch.empty()) return g_.add(gnode{});   // never
    if (ch.size() == 1) return ch[0];
    gnode a;
    a.kind = gkind::alt;
    a.children = std::move(ch);
    return g_.add(std::move(a));
  }

  int32_t compile_uncached(int32_t idx, int depth) {
    const schema_node& n = s_.nodes[idx];
    if (n.never) return g_.add(gnode{});
    if (!n.any_of.empty()) {
      std::vector<int32_t> ch;
      for (int32_t c : n.any_of) ch.push_back(compile(c, depth + 1));
      return alt_of(std::move(ch));
    }
    if (n.has_enum) {
      // Only the enum values that satisfy the node's other keywords.
      std::vector<int32_t> ch;
      schema without_enum;
      without_enum.nodes = s_.nodes;
      without_enum.nodes[idx].has_enum = false;
      for (const auto& v : n.enum_values)
        if (validate_at(without_enum, idx, v).empty()) ch.push_back(g_.literal(v.dump()));
      if (ch.empty()) throw std::runtime_error("no enum value satisfies the schema at " + n.path);
      return alt_of(std::move(ch));
    }
    std::vector<int32_t> ch;
    uint8_t t = n.types;
    bool unconstrained = t == all_types && n.properties.empty() && n.required.empty() && n.items < 0 &&
                         n.min_length == 0 && n.max_length < 0 && !n.minimum && !n.maximum &&
                         !n.exclusive_minimum && !n.exclusive_maximum && n.min_items == 0 && n.max_items < 0 &&
                         n.additional_allowed && n.additional < 0;
    if (unconstrained) return g_.any();
    if (t & uint8_t(json_type::object)) ch.push_back(compile_object(n, depth));
    if (t & uint8_t(json_type::array)) {
      gnode a;
      a.kind = gkind::array;
      a.item = n.items >= 0 ? compile(n.items, depth + 1) : g_.any();
      a.min_items = n.min_items;
      a.max_items = n.max_items;
      ch.push_back(g_.add(std::move(a)));
    }
    if (t & uint8_t(json_type::string)) {
      gnode s;
      s.kind = gkind::string;
      s.min_len = n.min_length;
      s.max_len = n.max_length;
      ch.push_back(g_.add(std::move(s)));
    }
    if (t & (uint8_t(json_type::number) | uint8_t(json_type::integer))) {
      gnode x;
      x.kind = gkind::number;
      x.integer = !(t & uint8_t(json_type::number));
      auto lo = [&](double v, bool excl) {
        if (!x.has_lo || v > x.lo || (v == x.lo && excl)) { x.has_lo = true; x.lo = v; x.lo_excl = excl; }
      };
      auto hi = [&](double v, bool excl) {
        if (!x.has_hi || v < x.hi || (v == x.hi && excl)) { x.has_hi = true; x.hi = v; x.hi_excl = excl; }
      };
      if (n.minimum) lo(*n.minimum, false);
      if (n.exclusive_minimum) lo(*n.exclusive_minimum, true);
      if (n.maximum) hi(*n.maximum, false);
      if (n.exclusive_maximum) hi(*n.exclusive_maximum, true);
      if (x.has_lo && x.has_hi && (x.lo > x.hi || (x.lo == x.hi && (x.lo_excl || x.hi_excl))))
        throw std::runtime_error("empty number range at " + n.path);
      if (x.integer && x.has_lo && x.has_hi && std::floor(x.hi) < std::ceil(x.lo))
        throw std::runtime_error("no integer in range at " + n.path);
      if ((x.has_lo && std::fabs(x.lo) >= 1e15) || (x.has_hi && std::fabs(x.hi) >= 1e15))
        throw std::runtime_error("number bounds beyond 1e15 are not supported at " + n.path);
      ch.push_back(g_.add(std::move(x)));
    }
    if (t & uint8_t(json_type::boolean)) {
      ch.push_back(g_.literal("true"));
      ch.push_back(g_.literal("false"));
    }
    if (t & uint8_t(json_type::null)) ch.push_back(g_.literal("null"));
    return alt_of(std::move(ch));
  }

  int32_t compile_object(const schema_node& n, int depth) {
    gnode o;
    o.kind = gkind::object;
    if (n.properties.empty() && n.required.empty() && n.additional_allowed) {
      o.free_value = n.additional >= 0 ? compile(n.additional, depth + 1) : g_.any();
      if (g_.key_node < 0) g_.any();
      return g_.add(std::move(o));
    }
    auto add_prop = [&](const std::string& name, int32_t value) {
      gprop p;
      std::string q;
      json::append_quoted(q, name);
      p.key_text = q.substr(1, q.size() - 2);
      p.value = value;
      o.props.push_back(std::move(p));
    };
    for (const auto& [name, sub] : n.properties) add_prop(name, compile(sub, depth + 1));
    for (const auto& r : n.required) {
      bool declared = false;
      for (const auto& [name, _] : n.properties) declared = declared || name == r;
      if (declared) continue;
      if (!n.additional_allowed)
        throw std::runtime_error("required property '" + r + "' is not allowed (additionalProperties false) at " + n.path);
      add_prop(r, n.additional >= 0 ? compile(n.additional, depth + 1) : g_.any());
    }
    if (o.props.size() > 64) throw std::runtime_error("more than 64 properties at " + n.path);
    for (size_t i = 0; i < o.props.size(); i++) {
      std::string name;
      // required by name (the JSON-escaped text round-trips through the schema's name)
      for (const auto& r : n.required) {
        std::string q;
        json::append_quoted(q, r);
        if (q.substr(1, q.size() - 2) == o.props[i].key_text) o.props[i].required = true;
      }
      if (o.props[i].required) o.required_mask |= uint64_t(1) << i;
    }
    return g_.add(std::move(o));
  }

  grammar& g_;
  const schema& s_;
  std::map<int32_t, int32_t> memo_;
};

}  // namespace

int32_t compile_schema_into(grammar& g, const schema& s) {
  compiler c(g, s);
  return c.compile(0, 0);
}

grammar make_json_grammar(const schema& s, json_whitespace ws_style) {
  grammar g;
  g.ws = ws_style;
  if (ws_style == json_whitespace::spaced) g.max_ws_node = 2;
  int32_t value = compile_schema_into(g, s);
  gnode ws;
  ws.kind = gkind::ws;
  int32_t w = g.add(ws);
  gnode root;
  root.kind = gkind::seq;
  root.children = {w, value};
  g.root = g.add(std::move(root));
  g.description = s.text;
  return g;
}

// ---------------------------------------------------------------------------
// matcher

match_state matcher::initial() const {
  match_state s;
  frame f;
  f.node = g_.root;
  s.stacks.push_back({f});
  return s;
}

uint64_t matcher::key_candidates(const frame& f, const gnode& n) const {
  size_t np = n.props.size();
  uint64_t all = np >= 64 ? ~uint64_t(0) : ((uint64_t(1) << np) - 1);
  if (!n.ordered) return all & ~f.mask;
  uint64_t c = 0;
  for (size_t i = f.count; i < np; i++) {
    c |= uint64_t(1) << i;
    if (n.props[i].required) break;
  }
  return c;
}

void matcher::on_child_done(frame& p) const {
  const gnode& n = g_.nodes[p.node];
  switch (n.kind) {
    case gkind::array:
      p.count++;
      if (n.max_items < 0 && p.count > n.min_items) p.count = static_cast<uint32_t>(n.min_items);
      p.phase = A_AFTER;
      p.ws = 0;
      break;
    case gkind::object:
      if (p.phase == O_FREEKEY) {
        p.phase = O_COLON;
      } else {
        if (n.free_value < 0) {
          p.mask |= uint64_t(1) << p.aux;
          if (n.ordered) p.count = p.aux + 1;
        }
        p.phase = O_AFTER;
      }
      p.ws = 0;
      break;
    case gkind::seq:
      p.count++;
      p.phase = 0;
      break;
    case gkind::repeat:
      if (p.phase == R_CHILD) {
        p.count++;
        if (n.max_rep < 0 && p.count > n.min_rep) p.count = static_cast<uint32_t>(n.min_rep);
        p.phase = R_AFTER;
      } else {
        p.phase = R_START;
      }
      break;
    default: break;
  }
}

bool matcher::frame_can_end(const frame& f) const {
  const gnode& n = g_.nodes[f.node];
  switch (n.kind) {
    case gkind::literal: return f.pos == n.text.size();
    case gkind::ws: return true;
    case gkind::string: return f.phase == S_DONE;
    case gkind::number: return number_can_end(n, f);
    case gkind::array: return f.phase == A_DONE;
    case gkind::object: return f.phase == O_DONE;
    case gkind::seq:
      if (f.phase != 0) return false;
      for (size_t i = f.count; i < n.children.size(); i++) if (!nullable(g_, n.children[i])) return false;
      return true;
    case gkind::repeat: return f.phase == R_AFTER && f.count >= n.min_rep;
    default: return false;
  }
}

void matcher::start(stack& st, int32_t node, uint8_t b, std::vector<stack>& out) const {
  const gnode& n = g_.nodes[node];
  if (n.kind == gkind::alt) {
    for (int32_t c : n.children) {
      stack copy = st;
      start(copy, c, b, out);
    }
    return;
  }
  if (n.kind == gkind::never) return;
  if (st.size() >= static_cast<size_t>(g_.max_depth)) return;
  frame f;
  f.node = node;
  st.push_back(f);
  feed(std::move(st), b, out);
}

void matcher::feed(stack st, uint8_t b, std::vector<stack>& out) const {
  for (;;) {
    if (st.empty()) return;   // the value is complete: no more bytes
    step r = step_frame(st, b, out);
    if (r == step::consumed) {
      out.push_back(std::move(st));
      return;
    }
    if (r != step::pass_up) return;
    st.pop_back();
    if (!st.empty()) on_child_done(st.back());
  }
}

matcher::step matcher::step_frame(stack& st, uint8_t b, std::vector<stack>& out) const {
  frame& f = st.back();
  const gnode& n = g_.nodes[f.node];
  // A gap where JSON may have whitespace: free takes up to max_ws bytes of it, spaced none.
  const bool spaced = g_.ws == json_whitespace::spaced;
  auto take_ws = [&]() {
    if (!spaced && is_ws(b) && f.ws < g_.max_ws) {
      f.ws++;
      return true;
    }
    return false;
  };
  // The gap after ':' or ',': spaced takes at most one ' ' (f.ws counts it); free is take_ws.
  auto sep_ws = [&]() {
    if (!spaced) return take_ws();
    if (f.ws == 0 && b == ' ') {
      f.ws = 1;
      return true;
    }
    return false;
  };
  auto begin = [&](int32_t child) {   // f must not be used after this
    start(st, child, b, out);
    return step::forked;
  };
  switch (n.kind) {
    case gkind::never:
    case gkind::alt: return step::reject;

    case gkind::literal:
      if (f.pos < n.text.size()) {
        if (static_cast<uint8_t>(n.text[f.pos]) != b) return step::reject;
        f.pos++;
        return step::consumed;
      }
      return step::pass_up;

    case gkind::ws:
      if (is_ws(b) && f.count < static_cast<uint32_t>(g_.max_ws_node)) {
        f.count++;
        return step::consumed;
      }
      return step::pass_up;

    case gkind::string:
      switch (f.phase) {
        case S_OPEN:
          if (b != '"') return step::reject;
          f.phase = S_BODY;
          return step::consumed;
        case S_BODY: {
          if (b == '"') {
            if (f.count < n.min_len) return step::reject;
            f.phase = S_DONE;
            return step::consumed;
          }
          if (n.max_len >= 0 && f.count >= n.max_len) return step::reject;
          if (b < 0x20) return step::reject;
          if (b == '\\') {
            f.phase = S_ESC;
          } else if (b >= 0x80) {
            uint8_t need, lo = 0x80, hi = 0xBF;
            if (b >= 0xC2 && b <= 0xDF) need = 1;
            else if (b >= 0xE0 && b <= 0xEF) { need = 2; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
            else if (b >= 0xF0 && b <= 0xF4) { need = 3; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
            else return step::reject;
            f.phase = S_UTF8;
            f.aux = need;
            f.mask2 = lo | (uint64_t(hi) << 8);
          }
          f.count++;
          if (n.max_len < 0 && f.count > n.min_len) f.count = static_cast<uint32_t>(n.min_len);
          return step::consumed;
        }
        case S_UTF8: {
          uint8_t lo = f.mask2 & 0xFF, hi = (f.mask2 >> 8) & 0xFF;
          if (b < lo || b > hi) return step::reject;
          if (--f.aux == 0) {
            f.phase = S_BODY;
            f.mask2 = 0;
          } else {
            f.mask2 = 0x80 | (uint64_t(0xBF) << 8);
          }
          return step::consumed;
        }
        case S_ESC:
          if (b == 'u') {
            f.phase = S_HEX;
            f.pos = 0;
            f.mask2 = 0;
            return step::consumed;
          }
          if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
            f.phase = S_BODY;
            return step::consumed;
          }
          return step::reject;
        case S_HEX:
          if (!is_hex(b)) return step::reject;
          if (f.pos == 0 && (b == 'd' || b == 'D')) f.mask2 = 1;
          if (f.pos == 1 && f.mask2 == 1 && !(b >= '0' && b <= '7')) return step::reject;   // no surrogates
          if (++f.pos == 4) {
            f.phase = S_BODY;
            f.pos = 0;
            f.mask2 = 0;
          }
          return step::consumed;
        default: return step::pass_up;
      }

    case gkind::number: {
      frame t = f;
      bool exp_ok = !n.integer && !n.has_lo && !n.has_hi;
      bool ok = false;
      switch (f.phase) {
        case N_START:
          if (b == '-') { t.phase = N_MINUS; t.mask |= 1; ok = true; break; }
          [[fallthrough]];
        case N_MINUS:
          if (b == '0') { t.phase = N_ZERO; t.count = 1; ok = true; }
          else if (b >= '1' && b <= '9') { t.phase = N_INT; t.count = 1; t.num = b - '0'; ok = true; }
          break;
        case N_ZERO:
        case N_INT:
          if (is_digit(b) && f.phase == N_INT && f.count < max_int_digits) {
            t.count++;
            t.num = t.num * 10 + (b - '0');
            ok = true;
          } else if (b == '.' && !n.integer) {
            t.phase = N_DOT;
            t.aux = 0;
            ok = true;
          } else if ((b == 'e' || b == 'E') && exp_ok) {
            t.phase = N_E;
            ok = true;
          }
          break;
        case N_DOT:
        case N_FRAC:
          if (is_digit(b) && f.aux < max_frac_digits) {
            t.phase = N_FRAC;
            t.aux++;
            t.num += (b - '0') * pow10i(-static_cast<int>(t.aux));
            ok = true;
          } else if ((b == 'e' || b == 'E') && exp_ok && f.phase == N_FRAC) {
            t.phase = N_E;
            ok = true;
          }
          break;
        case N_E:
          if (b == '+' || b == '-') { t.phase = N_ESIGN; ok = true; break; }
          [[fallthrough]];
        case N_ESIGN:
          if (is_digit(b)) { t.phase = N_EXP; t.pos = 1; ok = true; }
          break;
        case N_EXP:
          if (is_digit(b) && f.pos < max_exp_digits) { t.pos++; ok = true; }
          break;
      }
      if (ok && number_feasible(n, t)) {
        f = t;
        return step::consumed;
      }
      return number_can_end(n, f) ? step::pass_up : step::reject;
    }

    case gkind::array:
      switch (f.phase) {
        case A_OPEN:
          if (b != '[') return step::reject;
          f.phase = A_FIRST;
          f.ws = 0;
          return step::consumed;
        case A_FIRST:
          if (take_ws()) return step::consumed;
          if (b == ']' && n.min_items == 0) { f.phase = A_DONE; return step::consumed; }
          if (n.max_items == 0) return step::reject;
          f.phase = A_ITEM;
          f.ws = 0;
          return begin(n.item);
        case A_AFTER:
          if (take_ws()) return step::consumed;
          if (b == ',' && (n.max_items < 0 || f.count < n.max_items)) { f.phase = A_COMMA; f.ws = 0; return step::consumed; }
          if (b == ']' && f.count >= n.min_items) { f.phase = A_DONE; return step::consumed; }
          return step::reject;
        case A_COMMA:
          if (sep_ws()) return step::consumed;
          f.phase = A_ITEM;
          f.ws = 0;
          return begin(n.item);
        case A_DONE: return step::pass_up;
        default: return step::reject;
      }

    case gkind::object: {
      auto begin_key = [&]() -> step {
        if (n.free_value >= 0) {
          f.phase = O_FREEKEY;
          f.ws = 0;
          return begin(g_.key_node);
        }
        uint64_t c = key_candidates(f, n);
        if (!c) return step::reject;
        f.mask2 = c;
        f.pos = 0;
        f.phase = O_KEY;
        f.ws = 0;
        return step::consumed;
      };
      bool required_done = (n.required_mask & ~f.mask) == 0;
      switch (f.phase) {
        case O_OPEN:
          if (b != '{') return step::reject;
          f.phase = O_FIRST;
          f.ws = 0;
          return step::consumed;
        case O_FIRST:
          if (take_ws()) return step::consumed;
          if (b == '}' && required_done) { f.phase = O_DONE; return step::consumed; }
          if (b == '"') return begin_key();
          return step::reject;
        case O_KEY: {
          if (b == '"') {
            for (size_t i = 0; i < n.props.size(); i++) {
              if ((f.mask2 >> i & 1) && n.props[i].key_text.size() == f.pos) {
                f.aux = static_cast<uint32_t>(i);
                f.phase = O_COLON;
                f.ws = 0;
                f.mask2 = 0;
                f.pos = 0;
                return step::consumed;
              }
            }
            return step::reject;
          }
          uint64_t c = 0;
          for (size_t i = 0; i < n.props.size(); i++) {
            const std::string& k = n.props[i].key_text;
            if ((f.mask2 >> i & 1) && f.pos < k.size() && static_cast<uint8_t>(k[f.pos]) == b) c |= uint64_t(1) << i;
          }
          if (!c) return step::reject;
          f.mask2 = c;
          f.pos++;
          return step::consumed;
        }
        case O_COLON:
          if (take_ws()) return step::consumed;
          if (b != ':') return step::reject;
          f.phase = O_GAP;
          f.ws = 0;
          return step::consumed;
        case O_GAP: {
          if (sep_ws()) return step::consumed;
          f.phase = O_VALUE;
          f.ws = 0;
          int32_t v = n.free_value >= 0 ? n.free_value : n.props[f.aux].value;
          return begin(v);
        }
        case O_AFTER:
          if (take_ws()) return step::consumed;
          if (b == ',' && (n.free_value >= 0 || key_candidates(f, n))) { f.phase = O_COMMA; f.ws = 0; return step::consumed; }
          if (b == '}' && required_done) { f.phase = O_DONE; return step::consumed; }
          return step::reject;
        case O_COMMA:
          if (sep_ws()) return step::consumed;
          if (b == '"') return begin_key();
          return step::reject;
        case O_DONE: return step::pass_up;
        default: return step::reject;
      }
    }

    case gkind::seq:
      if (f.count < n.children.size()) {
        f.phase = 1;
        return begin(n.children[f.count]);
      }
      return step::pass_up;

    case gkind::repeat:
      switch (f.phase) {
        case R_START:
          f.phase = R_CHILD;
          return begin(n.child);
        case R_AFTER: {
          bool more = n.max_rep < 0 || f.count < n.max_rep;
          bool end = f.count >= n.min_rep;
          if (end) {
            stack up = st;
            up.pop_back();
            if (!up.empty()) on_child_done(up.back());
            feed(std::move(up), b, out);
          }
          if (more) {
            st.back().phase = R_SEP;
            start(st, n.sep, b, out);
          }
          return step::forked;
        }
        default: return step::reject;
      }
  }
  return step::reject;
}

bool matcher::advance(const match_state& s, uint8_t b, match_state& out) const {
  out.stacks.clear();
  for (const auto& st : s.stacks) feed(st, b, out.stacks);
  if (out.stacks.size() > 1) {
    auto less = [](const stack& a, const stack& c) {
      if (a.size() != c.size()) return a.size() < c.size();
      return std::memcmp(a.data(), c.data(), a.size() * sizeof(frame)) < 0;
    };
    auto eq = [](const stack& a, const stack& c) {
      return a.size() == c.size() && std::memcmp(a.data(), c.data(), a.size() * sizeof(frame)) == 0;
    };
    std::sort(out.stacks.begin(), out.stacks.end(), less);
    out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end(), eq), out.stacks.end());
    if (out.stacks.size() > 64) out.stacks.resize(64);   // NOTE: drops alternatives, never admits invalid text
  }
  return !out.dead();
}

bool matcher::advance_bytes(match_state& s, std::string_view bytes) const {
  match_state next;
  for (char c : bytes) {
    if (!advance(s, static_cast<uint8_t>(c), next)) return false;
    std::swap(s, next);
  }
  return true;
}

bool matcher::can_finish(const match_state& s) const {
  for (const auto& st0 : s.stacks) {
    stack st = st0;
    for (;;) {
      if (st.empty()) return true;
      if (!frame_can_end(st.back())) break;
      st.pop_back();
      if (!st.empty()) on_child_done(st.back());
    }
  }
  return false;
}

void matcher::key(const match_state& s, std::string& out) const {
  for (const auto& st : s.stacks) {
    uint32_t n = static_cast<uint32_t>(st.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(reinterpret_cast<const char*>(st.data()), st.size() * sizeof(frame));
  }
}

bool matcher::in_plain_string(const match_state& s, int64_t* remaining) const {
  if (s.stacks.size() != 1 || s.stacks[0].empty()) return false;
  const frame& f = s.stacks[0].back();
  const gnode& n = g_.nodes[f.node];
  if (n.kind != gkind::string || f.phase != S_BODY) return false;
  *remaining = n.max_len < 0 ? -1 : n.max_len - static_cast<int64_t>(f.count);
  return true;
}

}  // namespace agentq::grammar
