#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "upstream/model_load.hpp"

using namespace sluice::upstream;
using Sent = ModelLoad::Sent;

TEST(ModelLoad, ChangesAreCountedAndAJumpAfterOneIsAReload) {
  ModelLoad m;
  const auto a = load_signature({});
  const auto b = load_signature({.num_ctx = 8192});
  EXPECT_NE(a, b);
  EXPECT_EQ(m.classify(a), Sent::first);
  m.answered(Sent::first, a, true, 2100);  // a cold load is no baseline
  EXPECT_EQ(m.usual_ms(), 0);
  EXPECT_EQ(m.classify(a), Sent::same);
  m.answered(Sent::same, a, true, 20);
  EXPECT_EQ(m.usual_ms(), 20);
  EXPECT_EQ(m.classify(b), Sent::changed);
  m.answered(Sent::changed, b, true, 2120);
  EXPECT_EQ(m.changes(), 1u);
  EXPECT_EQ(m.reloads(), 1u);
  EXPECT_EQ(m.current(), b);
  // A change answered as fast as usual (a server that did not reload) is no reload; nor is
  // one just over twice the usual time when that is a few milliseconds.
  m.answered(m.classify(a), a, true, 25);
  m.answered(m.classify(b), b, true, 60);
  EXPECT_EQ(m.changes(), 3u);
  EXPECT_EQ(m.reloads(), 1u);
}

TEST(ModelLoad, OnlyAnsweredRequestsCountAndOnlyStreamsJudge) {
  ModelLoad m;
  const auto a = load_signature({});
  const auto b = load_signature({.num_gpu = 0});
  m.answered(Sent::first, a, true, 10);
  m.answered(Sent::same, a, true, 10);
  // A refused connection or an error answer: the model was not loaded with b.
  m.answered(m.classify(b), b, false, -1);
  EXPECT_EQ(m.current(), a);
  EXPECT_EQ(m.changes(), 0u);
  // A whole (not streamed) answer: the options are noted, its time judges nothing.
  m.answered(m.classify(b), b, true, -1);
  EXPECT_EQ(m.current(), b);
  EXPECT_EQ(m.changes(), 1u);
  EXPECT_EQ(m.reloads(), 0u);
  EXPECT_EQ(m.usual_ms(), 10);
  // Not tracked at all.
  m.answered(Sent::none, a, true, 5000);
  EXPECT_EQ(m.current(), b);
}

TEST(ModelLoad, TheSignatureReadsTheThreeOptionsOnly) {
  auto body = [](const char* json) { return boost::json::parse(json).as_object(); };
  const auto none = load_signature(load_values(body(R"({"model":"m"})")));
  EXPECT_EQ(none, load_signature(load_values(body(R"({"options":{"temperature":0.5,"seed":1}})"))));
  EXPECT_NE(none, load_signature(load_values(body(R"({"options":{"num_gpu":-1}})"))));
  EXPECT_EQ(load_signature(load_values(body(R"({"options":{"num_ctx":4096,"num_batch":64}})"))),
            load_signature(load_values(body(R"({"options":{"num_batch":64.0,"num_ctx":4096}})"))));
  EXPECT_NE(load_signature(load_values(body(R"({"options":{"num_ctx":4096}})"))),
            load_signature(load_values(body(R"({"options":{"num_batch":4096}})"))));
  EXPECT_NE(none, 0u);
}
