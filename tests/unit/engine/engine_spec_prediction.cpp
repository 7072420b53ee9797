// Predicted Outputs (#32) on the real tiny model: a token_request's / turn_request's prediction
// feeds the proposer as lookup text; the output is token-identical to decoding without it, and
// a prediction close to the output is mostly accepted (accepted_prediction_tokens > 0).
#include <doctest/doctest.h>

#include "engine_impl.h"
#include "golden.h"
#include "spec/ngram_proposer.h"
#include "test_env.h"

using namespace agentq;

namespace {

std::unique_ptr<engine_impl> load(bool spec, bool lookup = true) {
  auto c = test::tiny_config();
  c.spec = spec;
  c.spec_lookup = lookup;
  return test::load_as<engine_impl>(c);
}

}  // namespace

TEST_CASE("prediction: the proposer starts at the prediction's head and follows it") {
  spec_params sp;
  sp.context = false;
  ngram_proposer p(sp, {10, 11, 12, 13, 14, 15, 16, 17});
  std::vector<token_id> out;
  std::vector<token_id> ctx = {1, 2, 3};   // a prompt, nothing generated yet
  p.propose(ctx, 0, 8, out);
  CHECK(out == std::vector<token_id>{10, 11, 12, 13});  // k starts at 4
  p.on_verified(4, 4);
  ctx.insert(ctx.end(), {10, 11, 12, 13, 14});
  p.propose(ctx, 5, 8, out);
  CHECK(out == std::vector<token_id>{15, 16, 17});      // the prediction's rest
  // an edit: the output left the prediction and came back to it ("12 13" matches again)
  ctx = {1, 2, 3, 10, 11, 99, 12, 13};
  p.propose(ctx, 5, 8, out);
  CHECK(out == std::vector<token_id>{14, 15, 16, 17});
  // the context alone is not looked up with context = false
  ctx = {5, 6, 7, 5, 6};
  p.propose(ctx, 2, 8, out);
  CHECK(out.empty());
}

TEST_CASE("prediction: greedy output is token-identical and a good prediction is accepted") {
  const auto g = test::load_golden();
  REQUIRE(!g.empty());
  auto off = load(false);
  auto pred_only = load(true, /*lookup=*/false);
  for (size_t i = 0; i < std::min<size_t>(g.size(), 3); ++i) {
    auto req = test::greedy(g[i].prompt_ids, 100);
    const auto want = test::run_one(*off, req).output_ids;
    // the exact output as the prediction
    auto exact = req;
    exact.prediction = want;
    auto a = test::run_one(*pred_only, exact);
    CHECK(a.output_ids == want);
    MESSAGE("exact prediction: accepted " << a.usage.n_tokens_draft_accepted << ", rejected "
                                          << a.usage.n_tokens_draft_rejected << " of " << want.size());
    CHECK(a.usage.n_tokens_draft_accepted >= int32_t(want.size()) * 3 / 4);
    // an edited prediction: a few tokens replaced in the middle, a few dropped near the end
    auto edited = req;
    edited.prediction = want;
    for (size_t j = 30; j < 34 && j < edited.prediction.size(); ++j) edited.prediction[j] = 5;
    if (edited.prediction.size() > 80) edited.prediction.erase(edited.prediction.begin() + 70, edited.prediction.begin() + 73);
    auto b = test::run_one(*pred_only, edited);
    CHECK(b.output_ids == want);
    MESSAGE("edited prediction: accepted " << b.usage.n_tokens_draft_accepted << ", rejected "
                                           << b.usage.n_tokens_draft_rejected);
    CHECK(b.usage.n_tokens_draft_accepted > 0);
    CHECK(b.usage.n_tokens_draft_accepted < a.usage.n_tokens_draft_accepted + 1);
    // an unrelated prediction changes nothing but the counters
    auto wrong = req;
    wrong.prediction = g[(i + 1) % g.size()].output_ids;
    CHECK(test::run_one(*pred_only, wrong).output_ids == want);
  }
  // seeded sampling: the same draws with and without a prediction
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    auto req = test::greedy(g[0].prompt_ids, 60);
    req.sampling.temperature = 0.8f;
    req.sampling.top_p = 0.95f;
    req.sampling.seed = seed;
    const auto want = test::run_one(*off, req).output_ids;
    req.prediction = g[0].output_ids;
    CHECK_MESSAGE(test::run_one(*pred_only, req).output_ids == want, "seed " << seed);
  }
}

TEST_CASE("prediction: a turn's prediction text is tokenized and used; batched turns stay exact") {
  auto off = load(false), on = load(true);
  turn_request t;
  chat_message user;
  user.content = "Once upon a time";
  t.messages = {user};
  t.max_tokens = 80;
  auto run_turns = [](engine_impl& e, std::vector<turn_request> reqs) {
    std::vector<turn_result> out(reqs.size());
    size_t n_done = 0;
    for (size_t i = 0; i < reqs.size(); ++i)
      e.submit(std::move(reqs[i]), turn_callbacks{nullptr, [&out, &n_done, i](turn_result r) {
                                                    out[i] = std::move(r);
                                                    ++n_done;
                                                  }});
    for (int guard = 0; guard < 100000 && n_done < out.size(); ++guard) {
      e.step();
      e.sanity();
    }
    REQUIRE(n_done == out.size());
    return out;
  };
  const turn_result want = run_turns(*off, {t})[0];
  REQUIRE(!want.message.content.empty());
  auto p = t;
  p.prediction = want.message.content;
  std::vector<turn_request> batch = {p, t, p, t};
  for (size_t i = 0; i < batch.size(); ++i) batch[i].job_key = 100 + i;
  auto got = run_turns(*on, batch);
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK_MESSAGE(got[i].output_ids == want.output_ids, "turn " << i);
    CHECK(got[i].message.content == want.message.content);
  }
  MESSAGE("with prediction: accepted " << got[0].usage.n_tokens_draft_accepted << " of " << want.output_ids.size());
  CHECK(got[0].usage.n_tokens_draft_accepted > got[1].usage.n_tokens_draft_accepted);
  CHECK(got[0].usage.n_tokens_draft_accepted >= int32_t(want.output_ids.size()) / 2);
}
