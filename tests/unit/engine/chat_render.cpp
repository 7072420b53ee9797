// Chat rendering: byte-for-byte agreement with the real Jinja templates (the
// expected prompts in data/chat/ were produced by scripts/dev/render_reference.py
// with jinja2 from shared/templates/*.jinja and data/chat/templates/*.jinja), a few hand-checked inline cases,
// family detection, and the append-only property with its documented breaks.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "chat/chat.h"
#include "chat/messages_json.h"
#include "json/json.h"
#include "test_env.h"

using namespace agentq;
using chat::template_family;

static std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

static std::filesystem::path data_dir() { return test::source_dir() / "tests/unit/engine/data/chat"; }

TEST_CASE("renders exactly what the real templates render") {
  std::string err;
  auto cases = json::parse(slurp(data_dir() / "cases.json"), &err);
  REQUIRE_MESSAGE(cases, err);
  int n_checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir())) {
    std::string file = entry.path().filename().string();
    if (!file.ends_with(".txt")) continue;
    std::string stem = file.substr(0, file.size() - 4);
    std::string fam_name = stem.substr(0, stem.rfind('.'));
    std::string case_name = stem.substr(stem.rfind('.') + 1);
    auto fam = chat::family_from_name(fam_name);
    REQUIRE_MESSAGE(fam, fam_name);
    const json::value* c = nullptr;
    for (const auto& x : cases->items()) if (x.find("name")->as_string() == case_name) c = &x;
    REQUIRE(c);
    auto msgs = chat::messages_from_json(c->find("messages")->dump(), &err);
    REQUIRE_MESSAGE(msgs, err);
    std::vector<tool_def> tools;
    if (const json::value* t = c->find("tools")) {
      auto parsed = chat::tools_from_json(t->dump(), &err);
      REQUIRE_MESSAGE(parsed, err);
      tools = *parsed;
    }
    const json::value* g = c->find("add_generation_prompt");
    bool gen = !g || g->as_bool();
    std::string expected = slurp(entry.path());
    std::string got = chat::render(*fam, *msgs, tools, gen);
    CHECK_MESSAGE(got == expected, file, "\n--- expected\n", expected, "\n--- got\n", got);
    n_checked++;
  }
  CHECK(n_checked >= 40);
}

static chat_message msg(role r, std::string content) {
  chat_message m;
  m.role = r;
  m.content = std::move(content);
  return m;
}
static chat_message call_msg(std::string content, std::string id, std::string name, std::string args) {
  chat_message m = msg(role::assistant, std::move(content));
  m.tool_calls.push_back({std::move(id), std::move(name), std::move(args)});
  return m;
}
static chat_message tool_msg(std::string id, std::string content) {
  chat_message m = msg(role::tool, std::move(content));
  m.tool_call_id = std::move(id);
  return m;
}
static std::vector<tool_def> one_tool() {
  return {{"get_time", "Current time in a timezone.",
           R"({"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]})"}};
}

TEST_CASE("hand-checked small cases") {
  std::vector<chat_message> m = {msg(role::user, "Hi")};
  CHECK(chat::render(template_family::chatml, m, {}, true) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(chat::render(template_family::qwen3, m, {}, true) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(chat::render(template_family::llama3, m, {}, true) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(chat::render(template_family::mistral, m, {}, true) == "<s>[INST]Hi[/INST]");
  CHECK(chat::render(template_family::phi3, m, {}, true) == "<|user|>\nHi<|end|>\n<|assistant|>\n");
  CHECK(chat::render(template_family::gemma, m, {}, true) == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  CHECK(chat::render(template_family::plain, m, {}, true) == "User: Hi\nAssistant:");

  // Llama 3: a tool result is printed as a JSON string (a Jinja string `is iterable`).
  std::vector<chat_message> t = {msg(role::user, "time?"), call_msg("", "c1", "get_time", R"({"tz":"UTC"})"),
                                 tool_msg("c1", "12:00 \"noon\"")};
  std::string l3 = chat::render(template_family::llama3, t, one_tool(), false);
  CHECK(l3.ends_with("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_time\", \"parameters\": "
                     "{\"tz\": \"UTC\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"
                     "\"12:00 \\\"noon\\\"\"<|eot_id|>"));
  // plain: tools in the system part, calls as <tool_call> lines right after "Assistant:", spaced
  // as the grammar writes them (the next turn reuses the sampled call's KV).
  std::string p = chat::render(template_family::plain, t, one_tool(), true);
  CHECK(p ==
        "System: You can call these tools:\n"
        "- get_time: Current time in a timezone. Arguments schema: "
        "{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}},\"required\":[\"tz\"]}\n"
        "To call a tool, reply with one line per call: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>\n"
        "User: time?\n"
        "Assistant:<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>\n"
        "Tool: 12:00 \"noon\"\n"
        "Assistant:");
}

TEST_CASE("detects the family of every shared template") {
  auto dir = test::shared_dir() / "templates";
  struct { const char* file; template_family f; } expect[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", template_family::chatml},
      {"Qwen-Qwen3-0.6B.jinja", template_family::qwen3},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", template_family::hermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", template_family::llama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", template_family::llama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", template_family::mistral},
      {"microsoft-Phi-3.5-mini-instruct.jinja", template_family::phi3},
      {"HuggingFaceTB-SmolLM3-3B.jinja", template_family::smollm3},
      {"google-gemma-2-2b-it.jinja", template_family::gemma},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", template_family::deepseek_r1},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", template_family::deepseek_r1_qwen},
      {"openai-gpt-oss-120b.jinja", template_family::harmony},
  };
  for (const auto& e : expect) {
    std::string t = slurp(dir / e.file);
    REQUIRE_MESSAGE(!t.empty(), e.file);
    CHECK_MESSAGE(chat::detect_family(t) == e.f, e.file);
  }
  // Templates added since, kept beside the expected prompts (scripts/dev/render_reference.py).
  const std::string phi4 = slurp(data_dir() / "templates" / "microsoft-phi-4.jinja");
  REQUIRE(!phi4.empty());
  CHECK(chat::detect_family(phi4) == template_family::phi4);
  // Phi-4-mini (arch phi3) differs from both Phi-3.5 and Phi-4: no newlines, '<|' + role + '|>'.
  const std::string phi4_mini = slurp(data_dir() / "templates" / "microsoft-Phi-4-mini-instruct.jinja");
  REQUIRE(!phi4_mini.empty());
  CHECK(chat::detect_family(phi4_mini) == template_family::phi4_mini);
  CHECK(chat::detect_family("") == template_family::plain);
  // A template that matches no family is "unknown", never silently plain.
  CHECK_FALSE(chat::detect_family("{{ messages }}"));
  CHECK(chat::family_from_name("chatml") == template_family::chatml);
  CHECK(chat::family_from_name("llama3.2") == template_family::llama3);
  CHECK_FALSE(chat::family_from_name("gpt"));
  for (auto f : {template_family::plain, template_family::chatml, template_family::hermes, template_family::qwen3,
                 template_family::llama3, template_family::mistral, template_family::phi3, template_family::phi4,
                 template_family::phi4_mini, template_family::smollm3,
                 template_family::gemma, template_family::deepseek_r1, template_family::deepseek_r1_qwen,
                 template_family::harmony})
    CHECK(chat::family_from_name(chat::to_string(f)) == f);
  CHECK(chat::family_from_name("gpt-oss") == template_family::harmony);
}

// Indices k where render(first k messages, generation prompt iff message k is the
// assistant's) is NOT a prefix of render(first k+1 messages, no generation prompt).
static std::vector<size_t> append_breaks(template_family f, const std::vector<chat_message>& m,
                                         const std::vector<tool_def>& tools) {
  std::vector<size_t> breaks;
  for (size_t k = 1; k < m.size(); k++) {
    std::vector<chat_message> a(m.begin(), m.begin() + k), b(m.begin(), m.begin() + k + 1);
    bool gen = m[k].role == role::assistant;
    std::string ra = chat::render(f, a, tools, gen), rb = chat::render(f, b, tools, false);
    if (!rb.starts_with(ra)) breaks.push_back(k);
  }
  return breaks;
}

TEST_CASE("append-only: prefixes stay prefixes, except the documented breaks") {
  // 0 system, 1 user, 2 assistant call, 3 tool, 4 tool, 5 assistant, 6 user, 7 assistant (reasoning), 8 user
  std::vector<chat_message> m = {
      msg(role::system, "You are an agent."),
      msg(role::user, "What time is it in Paris and Tokyo?"),
      call_msg("", "call00001", "get_time", R"({"tz": "Europe/Paris"})"),
      tool_msg("call00001", "10:00"),
      tool_msg("call00001", "17:00"),
      msg(role::assistant, "Paris 10:00, Tokyo 17:00."),
      msg(role::user, "Thanks. And London?"),
      msg(role::assistant, "<think>\nOne hour behind Paris.\n</think>\n\n09:00."),
      msg(role::user, "Great."),
  };
  m[2].tool_calls.push_back({"call00002", "get_time", R"({"tz": "Asia/Tokyo"})"});
  auto tools = one_tool();
  using v = std::vector<size_t>;
  // chatml: a second tool result re-opens the first one's turn (k=4: the run's
  // closing "<|im_end|>\n" moves). Append all results of a step together.
  CHECK(append_breaks(template_family::chatml, m, tools) == v{4});
  // hermes: as chatml, and the last tool response lacks the "\n" it gets once a
  // message follows (k=5).
  CHECK(append_breaks(template_family::hermes, m, tools) == v{4, 5});
  // qwen3: the last assistant turn always carries a think block, dropped (when
  // empty) once anything follows it (k=3, 6); reasoning of turn 7 is dropped once
  // user message 8 arrives (k=8); plus the chatml tool-run break (k=4).
  CHECK(append_breaks(template_family::qwen3, m, tools) == v{3, 4, 6, 8});
  // llama3: the tool block swallows the first user message (k=1: the rendering
  // before it has an empty first user message).
  CHECK(append_breaks(template_family::llama3, m, tools) == v{1});
  // phi3: without a generation prompt the template ends in "<|endoftext|>", so
  // only appending the assistant's turn to a generation prompt keeps the prefix.
  CHECK(append_breaks(template_family::phi3, m, tools) == v{1, 3, 4, 6, 8});
  // phi4-mini: the same (its template also ends in eos_token without a generation prompt).
  CHECK(append_breaks(template_family::phi4_mini, m, tools) == v{1, 3, 4, 6, 8});
  // smollm3, gemma, plain, phi4: fully append-only.
  CHECK(append_breaks(template_family::smollm3, m, tools).empty());
  CHECK(append_breaks(template_family::phi4, m, tools).empty());
  CHECK(append_breaks(template_family::gemma, m, tools).empty());
  CHECK(append_breaks(template_family::plain, m, tools).empty());
  // deepseek-r1 (both distills): the generation prompt's "<think>\n" (and the reasoning)
  // is not part of the assistant turn once rendered (k = 2, 7; k = 5 follows tool
  // results, after which the template prints no prompt), and a second tool result
  // moves the run's "<｜tool▁outputs▁end｜>" (k=4).
  CHECK(append_breaks(template_family::deepseek_r1, m, tools) == v{2, 4, 7});
  CHECK(append_breaks(template_family::deepseek_r1_qwen, m, tools) == v{2, 4, 7});
  // mistral: the system prompt and tool list move to the last user message, so
  // every turn after a user message breaks (k = 2, 6, 7, 8).
  CHECK(append_breaks(template_family::mistral, m, tools) == v{2, 6, 7, 8});
  // harmony: a last assistant answer ends in <|return|> (no generation prompt), <|end|> once
  // anything follows (k = 6, 8); a call's reasoning is dropped once a final answer follows (none here).
  CHECK(append_breaks(template_family::harmony, m, tools) == v{6, 8});
  // Without tools and system prompt, mistral is append-only.
  std::vector<chat_message> simple = {msg(role::user, "a"), msg(role::assistant, "b"), msg(role::user, "c"),
                                      msg(role::assistant, "d")};
  CHECK(append_breaks(template_family::mistral, simple, {}).empty());
  // llama3 with tools: a conversation with no user message yet cannot be extended
  // (the first user message is printed inside the tool block).
  std::vector<chat_message> sys_only = {msg(role::system, "s"), msg(role::user, "u")};
  CHECK(append_breaks(template_family::llama3, sys_only, tools) == v{1});
}
