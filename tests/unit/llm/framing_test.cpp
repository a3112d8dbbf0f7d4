#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "llm/framing.hpp"

using namespace sluice::llm;

namespace {

struct Ev {
  std::string event, data, id;
  bool operator==(const Ev&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Ev& e) {
  return os << "{event=" << e.event << " data=" << e.data << " id=" << e.id << "}";
}

// Feeds the pieces in order, collecting events; stops at the first false.
struct SseRun {
  SseParser p;
  std::vector<Ev> events;
  bool ok = true;
  explicit SseRun(std::size_t max = 1 << 20) : p(max) {}
  SseRun& feed(std::string_view s) {
    if (ok) {
      ok = p.feed(s, [&](const SseEvent& e) {
        events.push_back({std::string(e.event), std::string(e.data), std::string(e.id)});
      });
    }
    return *this;
  }
};

std::vector<Ev> sse_whole(std::string_view s) {
  SseRun r;
  r.feed(s);
  EXPECT_TRUE(r.ok);
  return r.events;
}

const char* kStream =
    "data: {\"a\":1}\n\n"
    ": keep-alive comment\n\n"
    "event: ping\ndata: x\n\n"
    "data: first\ndata:second\ndata:  third\n\n"
    "id: 7\ndata: with id\n\n"
    "data\n\n"
    "data: [DONE]\n\n";

const std::vector<Ev> kExpected = {
    {"", "{\"a\":1}", ""},
    {"ping", "x", ""},
    {"", "first\nsecond\n third", ""},
    {"", "with id", "7"},
    {"", "", "7"},  // a bare "data" line is an event with empty data; the id persists
    {"", "[DONE]", "7"},
};

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
    s.replace(p, from.size(), to);
  }
  return s;
}

}  // namespace

TEST(Sse, WholeStreamInOneRead) {
  EXPECT_EQ(sse_whole(kStream), kExpected);
}

TEST(Sse, SplitAtEveryByteBoundary) {
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    const std::string s = replace_all(kStream, "\n", eol);
    for (std::size_t i = 0; i <= s.size(); ++i) {
      SseRun r;
      r.feed(std::string_view(s).substr(0, i)).feed(std::string_view(s).substr(i));
      ASSERT_TRUE(r.ok) << "split at " << i;
      ASSERT_EQ(r.events, kExpected) << "eol size " << eol.size() << " split at " << i;
      EXPECT_FALSE(r.p.pending());
    }
  }
}

TEST(Sse, SplitAtEveryPairOfBoundaries) {
  const std::string s = replace_all(kStream, "\n", "\r\n");
  for (std::size_t i = 0; i <= s.size(); i += 3) {
    for (std::size_t j = i; j <= s.size(); ++j) {
      SseRun r;
      std::string_view v = s;
      r.feed(v.substr(0, i)).feed(v.substr(i, j - i)).feed(v.substr(j));
      ASSERT_EQ(r.events, kExpected) << "splits at " << i << "," << j;
    }
  }
}

TEST(Sse, OneByteAtATime) {
  const std::string s = replace_all(kStream, "\n", "\r\n");
  SseRun r;
  for (char c : s) r.feed(std::string_view(&c, 1));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.events, kExpected);
}

TEST(Sse, RandomChunking) {
  std::mt19937 rng(1234);
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    std::string s;
    for (int i = 0; i < 20; ++i) s += kStream;
    s = replace_all(s, "\n", eol);
    for (int round = 0; round < 200; ++round) {
      SseRun r;
      std::size_t pos = 0;
      while (pos < s.size()) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
        r.feed(std::string_view(s).substr(pos, n));
        pos += n;
      }
      ASSERT_TRUE(r.ok);
      ASSERT_EQ(r.events.size(), kExpected.size() * 20);
      for (std::size_t i = 0; i < r.events.size(); ++i) {
        // (the id persists from one repetition to the next: compare event and data)
        const Ev& want = kExpected[i % kExpected.size()];
        ASSERT_EQ(r.events[i].data, want.data) << "event " << i;
        ASSERT_EQ(r.events[i].event, want.event) << "event " << i;
      }
    }
  }
}

TEST(Sse, CrLfSplitAcrossReadsIsOneLineEnd) {
  // "data: a\r" | "\ndata: b\r\n\r\n": the LF completes the CRLF, it is not a blank line.
  SseRun r;
  r.feed("data: a\r").feed("\ndata: b\r\n\r\n");
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].data, "a\nb");
}

TEST(Sse, LoneCrLineEnds) {
  auto ev = sse_whole("data: a\rdata: b\r\rdata: c\r\r");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "a\nb");
  EXPECT_EQ(ev[1].data, "c");
}

TEST(Sse, MixedLineEnds) {
  auto ev = sse_whole("data: a\r\ndata: b\n\r\ndata: c\r\n\n");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "a\nb");
  EXPECT_EQ(ev[1].data, "c");
}

TEST(Sse, SeveralEventsPerRead) {
  auto ev = sse_whole("data: 1\n\ndata: 2\n\ndata: 3\n\n");
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2].data, "3");
}

TEST(Sse, CommentsAndEventsWithoutDataAreNotDispatched) {
  auto ev = sse_whole(": ping\n\nevent: nothing\n\nid: 3\n\n:\n\n");
  EXPECT_TRUE(ev.empty());
}

TEST(Sse, OnlyOneLeadingSpaceIsStripped) {
  auto ev = sse_whole("data:no-space\n\ndata:  two\n\n");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "no-space");
  EXPECT_EQ(ev[1].data, " two");
}

TEST(Sse, ValueMayContainColons) {
  auto ev = sse_whole("data: {\"k\":\"a:b\"}\n\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "{\"k\":\"a:b\"}");
}

TEST(Sse, UnfinishedEventIsPendingAndNotDispatched) {
  SseRun r;
  r.feed("data: partial\n");
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.events.empty());
  EXPECT_TRUE(r.p.pending());
  r.feed("\n");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_FALSE(r.p.pending());
}

TEST(Sse, OversizeEventInOneReadFails) {
  SseRun r(64);
  r.feed("data: " + std::string(100, 'x') + "\n\n");
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.events.empty());
}

TEST(Sse, OversizePendingEventFailsBeforeItEnds) {
  SseRun r(64);
  r.feed("data: 1\n\n");
  r.feed("data: ");
  for (int i = 0; i < 10 && r.ok; ++i) r.feed(std::string(10, 'x'));
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.events.size(), 1u);
}

TEST(Sse, ManyDataLinesCountTowardsTheLimit) {
  std::string s;
  for (int i = 0; i < 20; ++i) s += "data: xxxxxxxx\n";
  SseRun r(64);
  r.feed(s);
  EXPECT_FALSE(r.ok);
}

TEST(Sse, EventsUpToTheLimitPass) {
  SseRun r(64);
  const std::string data(40, 'y');
  for (int i = 0; i < 100; ++i) r.feed("data: " + data + "\n\n");
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.events.size(), 100u);
}

// ---- NDJSON -------------------------------------------------------------------------

namespace {
struct NdRun {
  NdjsonParser p;
  std::vector<std::string> lines;
  bool ok = true;
  explicit NdRun(std::size_t max = 1 << 20) : p(max) {}
  NdRun& feed(std::string_view s) {
    if (ok) ok = p.feed(s, [&](std::string_view l) { lines.emplace_back(l); });
    return *this;
  }
  void finish() {
    p.finish([&](std::string_view l) { lines.emplace_back(l); });
  }
};
}  // namespace

TEST(Ndjson, SplitAtEveryByteBoundary) {
  const std::string s = "{\"a\":1}\n\n{\"b\":2}\r\n{\"c\":3}\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"};
  for (std::size_t i = 0; i <= s.size(); ++i) {
    NdRun r;
    r.feed(std::string_view(s).substr(0, i)).feed(std::string_view(s).substr(i));
    r.finish();
    ASSERT_TRUE(r.ok);
    ASSERT_EQ(r.lines, expected) << "split at " << i;
  }
}

TEST(Ndjson, CrLfSplitBetweenReads) {
  NdRun r;
  r.feed("{\"a\":1}\r").feed("\n{\"b\":2}\r\n");
  EXPECT_EQ(r.lines, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"}));
  EXPECT_FALSE(r.p.pending());
}

TEST(Ndjson, FinalLineWithoutNewlineIsDeliveredByFinish) {
  NdRun r;
  r.feed("{\"a\":1}\n{\"done\":true}");
  EXPECT_EQ(r.lines.size(), 1u);
  EXPECT_TRUE(r.p.pending());
  r.finish();
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[1], "{\"done\":true}");
  EXPECT_FALSE(r.p.pending());
  r.finish();  // nothing more
  EXPECT_EQ(r.lines.size(), 2u);
}

TEST(Ndjson, EmptyLinesSkipped) {
  NdRun r;
  r.feed("\n\r\n\n{}\n\n");
  r.finish();
  EXPECT_EQ(r.lines, (std::vector<std::string>{"{}"}));
}

TEST(Ndjson, OversizeLineFails) {
  NdRun a(16);
  a.feed(std::string(40, 'x') + "\n");
  EXPECT_FALSE(a.ok);
  NdRun b(16);
  for (int i = 0; i < 10 && b.ok; ++i) b.feed("xxxx");
  EXPECT_FALSE(b.ok);
  NdRun c(16);
  c.feed("0123456789\n0123456789\n");
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.lines.size(), 2u);
}
