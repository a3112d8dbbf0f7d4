#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "upstream/model_load.hpp"

using namespace sluice::upstream;

TEST(ModelLoad, ChangesAreCountedAndAJumpAfterOneIsAReload) {
  ModelLoad m;
  const auto a = load_signature({});
  const auto b = load_signature({.num_ctx = 8192});
  EXPECT_NE(a, b);
  EXPECT_EQ(m.sent(a), ModelLoad::Sent::first);
  m.answered(ModelLoad::Sent::first, 2100);  // a cold load is no baseline
  EXPECT_EQ(m.usual_ms(), 0);
  EXPECT_EQ(m.sent(a), ModelLoad::Sent::same);
  m.answered(ModelLoad::Sent::same, 20);
  EXPECT_EQ(m.usual_ms(), 20);
  EXPECT_EQ(m.sent(b), ModelLoad::Sent::changed);
  m.answered(ModelLoad::Sent::changed, 2120);
  EXPECT_EQ(m.changes(), 1u);
  EXPECT_EQ(m.reloads(), 1u);
  EXPECT_EQ(m.current(), b);
  // A change answered as fast as usual (a server that did not reload) is no reload; nor is
  // one just over twice the usual time when that is a few milliseconds.
  EXPECT_EQ(m.sent(a), ModelLoad::Sent::changed);
  m.answered(ModelLoad::Sent::changed, 25);
  EXPECT_EQ(m.sent(b), ModelLoad::Sent::changed);
  m.answered(ModelLoad::Sent::changed, 60);
  EXPECT_EQ(m.changes(), 3u);
  EXPECT_EQ(m.reloads(), 1u);
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
