// The tokenizer against the reference (tiktoken's own ids, in expected.json written by
// gen_expected.mjs), plus loading errors, the estimator, the chat formula and concurrency.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/text.hpp"
#include "rank_files.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace sluice::tokenizer;
namespace json = boost::json;

namespace {

const std::string kSourceDir = sluice::test::source_dir();
const std::string kRankDir = sluice::test::rank_dir();
const Encoding kEncodings[] = {Encoding::cl100k_base, Encoding::o200k_base};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const json::value& fixture() {
  static const json::value v = [] {
    const std::string text = read(kSourceDir + "/tests/unit/tokenizer/expected.json");
    return text.empty() ? json::value() : json::parse(text);
  }();
  return v;
}

// The real rank files, loaded once. A test using them starts with SLUICE_REQUIRE_RANK_FILES()
// (skipped without them); one that forgets fails here with the fix.
std::shared_ptr<const Bpe> ranks(Encoding e) {
  static std::map<Encoding, std::shared_ptr<const Bpe>> cache;
  static std::map<Encoding, std::string> errors;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const Encoding enc : kEncodings) {
      std::string error;
      cache[enc] = Bpe::load(kRankDir + "/" + std::string(encoding_name(enc)) + ".json", enc, &error);
      errors[enc] = error;
    }
  });
  if (!cache[e]) {
    ADD_FAILURE() << "rank file for " << encoding_name(e) << " not loaded (" << errors[e]
                  << "). Run scripts/fetch-tokenizer.sh (npm ci in data/tokenizer) first.";
  }
  return cache[e];
}

std::vector<std::uint32_t> ids_of(const json::value& v) {
  std::vector<std::uint32_t> out;
  for (const auto& x : v.as_array()) out.push_back(static_cast<std::uint32_t>(x.to_number<std::int64_t>()));
  return out;
}

std::string text_of(const json::object& c) {
  if (const auto* t = c.if_contains("text")) return std::string(t->as_string());
  std::string out;
  for (const auto& part : c.at("parts").as_array()) {
    const auto& p = part.as_array();
    const std::string seg(p[0].as_string());
    for (std::int64_t i = 0; i < p[1].to_number<std::int64_t>(); ++i) out += seg;
  }
  return out;
}


// Same construction as blockText() in gen_expected.mjs.
std::string unicode_block_text(std::uint32_t block) {
  std::string t;
  for (std::uint32_t cp = block * 4096; cp < (block + 1) * 4096; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string c;
    sluice::append_utf8(c, cp);
    for (const std::string_view part : {std::string_view(c), std::string_view("x"), std::string_view(c),
                                        std::string_view(c), std::string_view("1 "), std::string_view(c),
                                        std::string_view("'"), std::string_view(c), std::string_view(" A"),
                                        std::string_view(c), std::string_view("\n"), std::string_view(c),
                                        std::string_view("'s 1"), std::string_view(c), std::string_view("23\n")})
      t += part;
  }
  return t;
}

std::uint32_t fnv(const std::vector<std::uint32_t>& ids) {
  std::uint32_t h = 0x811c9dc5u;
  for (const std::uint32_t v : ids) {
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (8 * i)) & 0xFF;
      h *= 0x01000193u;
    }
  }
  return h;
}

std::string ename(Encoding e) { return std::string(encoding_name(e)); }

// A file under the build's temp dir, removed at scope exit.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& contents) {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("sluice_tok_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
               .string();
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

// A tiny vocabulary: the 256 bytes (ranks 0..255, base64 lines) and some merges.
std::string tiny_ranks(const std::vector<std::string>& merges) {
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto enc = [](const std::string& s) {
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < s.size(); i += 3) {
      const std::uint32_t v = (std::uint8_t(s[i]) << 16) | (std::uint8_t(s[i + 1]) << 8) | std::uint8_t(s[i + 2]);
      for (int k = 3; k >= 0; --k) out += b64[(v >> (6 * k)) & 63];
    }
    if (s.size() - i == 1) {
      const std::uint32_t v = std::uint8_t(s[i]) << 16;
      out += b64[(v >> 18) & 63];
      out += b64[(v >> 12) & 63];
      out += "==";
    } else if (s.size() - i == 2) {
      const std::uint32_t v = (std::uint8_t(s[i]) << 16) | (std::uint8_t(s[i + 1]) << 8);
      out += b64[(v >> 18) & 63];
      out += b64[(v >> 12) & 63];
      out += b64[(v >> 6) & 63];
      out += '=';
    }
    return out;
  };
  std::string out;
  int rank = 0;
  for (int b = 0; b < 256; ++b) out += enc(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
  for (const auto& m : merges) out += enc(m) + " " + std::to_string(rank++) + "\n";
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Exactness against tiktoken

TEST(Exact, FixturePresent) {
  ASSERT_TRUE(fixture().is_object()) << "tests/unit/tokenizer/expected.json missing or empty";
  EXPECT_GT(fixture().at("short").as_array().size(), 50u);
}

TEST(Exact, ShortStringsGiveTiktokensIds) {
  SLUICE_REQUIRE_RANK_FILES();
  for (const Encoding e : kEncodings) {
    const auto bpe = ranks(e);
    ASSERT_TRUE(bpe);
    for (const auto& c : fixture().at("short").as_array()) {
      const auto& obj = c.as_object();
      const std::string text = text_of(obj);
      const auto expected = ids_of(obj.at(ename(e)));
      EXPECT_EQ(bpe->encode(text), expected) << ename(e) << " text: " << text;
      EXPECT_EQ(bpe->count(text), expected.size()) << ename(e) << " text: " << text;
      EXPECT_EQ(bpe->decode(expected), text);
    }
  }
}

TEST(Exact, LongTextsGiveTiktokensCounts) {
  SLUICE_REQUIRE_RANK_FILES();
  for (const Encoding e : kEncodings) {
    const auto bpe = ranks(e);
    ASSERT_TRUE(bpe);
    for (const auto& c : fixture().at("long").as_array()) {
      const auto& obj = c.as_object();
      const std::string text = text_of(obj);
      const auto& want = obj.at(ename(e)).as_object();
      const auto expected_count = static_cast<std::size_t>(want.at("count").to_number<std::int64_t>());
      const auto first = ids_of(want.at("first"));
      const auto got = bpe->encode(text);
      EXPECT_EQ(got.size(), expected_count) << ename(e) << " " << obj.at("name").as_string();
      EXPECT_EQ(bpe->count(text), expected_count) << ename(e) << " " << obj.at("name").as_string();
      ASSERT_GE(got.size(), first.size());
      EXPECT_EQ(std::vector<std::uint32_t>(got.begin(), got.begin() + first.size()), first)
          << ename(e) << " " << obj.at("name").as_string();
      EXPECT_EQ(bpe->decode(got), text);
    }
  }
}

// Every Unicode scalar value in a few contexts (letters, digits, spaces, apostrophes), per
// block of 4096 code points: count and hash of the ids must equal tiktoken's.
TEST(Exact, EveryCodePointInContext) {
  SLUICE_REQUIRE_RANK_FILES();
  for (const Encoding e : kEncodings) {
    const auto bpe = ranks(e);
    ASSERT_TRUE(bpe);
    const auto& blocks = fixture().at("unicode_blocks").at(ename(e)).as_array();
    ASSERT_EQ(blocks.size(), 0x110000u / 4096);
    std::vector<std::uint32_t> differing;
    for (std::uint32_t b = 0; b < blocks.size(); ++b) {
      const auto ids = bpe->encode(unicode_block_text(b));
      const auto& want = blocks[b].as_array();
      if (ids.size() != static_cast<std::size_t>(want[0].to_number<std::int64_t>()) ||
          fnv(ids) != static_cast<std::uint32_t>(want[1].to_number<std::int64_t>()))
        differing.push_back(b);
    }
    std::string list;
    for (const auto b : differing) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " U+%04X", b * 4096);
      list += buf;
    }
    EXPECT_TRUE(differing.empty()) << ename(e) << ": blocks of 4096 code points that differ:" << list;
  }
}

TEST(Exact, SpecialTokensAreText) {
  SLUICE_REQUIRE_RANK_FILES();
  const auto bpe = ranks(Encoding::cl100k_base);
  ASSERT_TRUE(bpe);
  const auto ids = bpe->encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  for (const auto id : ids) EXPECT_LT(id, 100257u);
}

TEST(Exact, InvalidUtf8IsCountedNotRejected) {
  SLUICE_REQUIRE_RANK_FILES();
  for (const Encoding e : kEncodings) {
    const auto bpe = ranks(e);
    ASSERT_TRUE(bpe);
    const std::string bad = "ok \xff\xfe bytes \xc3(\xe2\x82 end \xf0\x9f\x98";
    const auto ids = bpe->encode(bad);
    EXPECT_EQ(bpe->decode(ids), bad);
    EXPECT_EQ(bpe->count(bad), ids.size());
    // Valid text around invalid bytes tokenizes as it would alone.
    EXPECT_EQ(bpe->count("hello world\xff"), bpe->count("hello world") + 1);
  }
}

TEST(Exact, HugeRunsAreFast) {
  SLUICE_REQUIRE_RANK_FILES();
  const auto bpe = ranks(Encoding::o200k_base);
  ASSERT_TRUE(bpe);
  // Pieces of 600 KB and more: the heap merge keeps these O(n log n); tiktoken's O(n^2)
  // scan would take hours.
  const std::string letters = [] {
    std::string s;
    std::uint32_t x = 12345;
    for (int i = 0; i < 600'000; ++i) {
      x = x * 1103515245u + 12345u;
      s += static_cast<char>('a' + (x >> 16) % 26);
    }
    return s;
  }();
  const auto ids = bpe->encode(letters);
  EXPECT_EQ(bpe->decode(ids), letters);
  EXPECT_EQ(bpe->count(letters), ids.size());
  EXPECT_GT(bpe->count(std::string(1'000'000, ' ')), 0u);
  EXPECT_EQ(bpe->count(std::string(3'000'000, '7')), 1'000'000u);
}

// ---------------------------------------------------------------------------------------
// Loading

TEST(Load, MissingFileNamesPath) {
  std::string error;
  EXPECT_EQ(Bpe::load("/nonexistent/cl100k_base.json", Encoding::cl100k_base, &error), nullptr);
  EXPECT_NE(error.find("/nonexistent/cl100k_base.json"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
}

TEST(Load, MalformedInputsSayWhere) {
  struct Case {
    std::string contents, expect;
  };
  const std::string bytes = tiny_ranks({});
  const std::vector<Case> cases = {
      {"", "empty file"},
      {"{\"pat_str\": \"x\",\n \"bpe_ranks\": 12}", "line 2 column 15: expected a string"},
      {"{\"bpe_ranks\": \"! 0 QQ==\"", "expected ',' or '}'"},
      {R"({"pat_str": "\\s+"})", "no \"bpe_ranks\""},
      {"{\"bpe_ranks\": \"! 0 QQ== Q*==\"}", "bpe_ranks line 1: token 2 (rank 1): invalid base64"},
      {"{\"bpe_ranks\": \"! x QQ==\"}", "bpe_ranks line 1: expected '! <first rank>"},
      {"QQ== 0\nQg== 1\nQw==\n", "line 3: expected '<base64 token> <rank>'"},
      {"QQ== 0\nQg== 0\n", "rank 0 appears twice"},
      {"QQ== 0\nQQ== 1\n", "rank 1 repeats the bytes of rank 0"},
      {"QQ== 0\nQg== 1\n", "no token for the single byte 0x00"},
      {bytes + "YWI= 256\n{{{ 257\n", "line 258: token 1 (rank 257): invalid base64"},
      {"{\"pat_str\": \"(unclosed\", \"bpe_ranks\": \"" +
           [&] {
             std::string s = "! 0";
             for (int b = 0; b < 256; ++b) {
               static const char* h = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
               s += ' ';
               s += h[b >> 2];
               s += h[(b & 3) << 4];
               s += "==";
             }
             return s;
           }() +
           "\"}",
       "pattern does not compile"},
  };
  for (const auto& c : cases) {
    const TempFile f(c.contents);
    std::string error;
    EXPECT_EQ(Bpe::load(f.path, Encoding::cl100k_base, &error), nullptr) << c.expect;
    EXPECT_NE(error.find(c.expect), std::string::npos) << "got: " << error << "\nwant: " << c.expect;
    EXPECT_EQ(error.rfind(f.path, 0), 0u) << error;
  }
}

TEST(Load, PlainTiktokenFileWithBuiltInPattern) {
  const TempFile f(tiny_ranks({"ab", "abc", " x", "cd", "abcd"}));
  std::string error;
  const auto bpe = Bpe::load(f.path, Encoding::cl100k_base, &error);
  ASSERT_TRUE(bpe) << error;
  EXPECT_EQ(bpe->vocabulary_size(), 261u);
  EXPECT_EQ(bpe->encoding(), Encoding::cl100k_base);
  EXPECT_NE(bpe->pattern().find("\\p{L}"), std::string::npos);
  // "abcd": ab(256) first, then abc(257) beats cd(259); then abcd(260).
  EXPECT_EQ(bpe->encode("abcd"), (std::vector<std::uint32_t>{260}));
  EXPECT_EQ(bpe->encode("abcde"), (std::vector<std::uint32_t>{260, 'e'}));
  EXPECT_EQ(bpe->encode("zab x"), (std::vector<std::uint32_t>{'z', 256, 258}));
  // The heap path (long piece) and the scan (short piece) make the same merges.
  std::string lng;
  for (int i = 0; i < 200; ++i) lng += "abcdcdab"[i % 8];
  const auto ids = bpe->encode(lng);
  std::vector<std::uint32_t> by_parts;
  for (int i = 0; i < 25; ++i) {
    const auto p = bpe->encode("abcdcdab");
    by_parts.insert(by_parts.end(), p.begin(), p.end());
  }
  EXPECT_EQ(ids, by_parts);
}

TEST(Load, JsonWithoutPatternUsesTheEncodingsPattern) {
  std::string ranks = "! 0";
  const std::string plain = tiny_ranks({"ab"});
  // Convert "<b64> <rank>" lines to the compressed form.
  std::istringstream in(plain);
  std::string tok, rank;
  while (in >> tok >> rank) ranks += " " + tok;
  const TempFile f("{\"special_tokens\": {\"<|endoftext|>\": 257}, \"extra\": [1, {\"a\": null}],\n \"bpe_ranks\": \"" + ranks + "\"}");
  std::string error;
  const auto bpe = Bpe::load(f.path, Encoding::o200k_base, &error);
  ASSERT_TRUE(bpe) << error;
  EXPECT_EQ(bpe->vocabulary_size(), 257u);
  EXPECT_NE(bpe->pattern().find("\\p{Lu}"), std::string::npos);
  EXPECT_EQ(bpe->encode("ab"), (std::vector<std::uint32_t>{256}));
}

// ---------------------------------------------------------------------------------------
// Names, models, Counter

TEST(Names, EncodingsAndModels) {
  EXPECT_EQ(encoding_from_name("cl100k_base"), Encoding::cl100k_base);
  EXPECT_EQ(encoding_from_name("o200k_base"), Encoding::o200k_base);
  EXPECT_EQ(encoding_from_name("p50k_base"), std::nullopt);
  EXPECT_EQ(encoding_name(Encoding::o200k_base), "o200k_base");
  for (const char* m : {"gpt-4o", "gpt-4o-mini-2024-07-18", "o1-preview", "o3-mini", "o4-mini",
                        "gpt-4.1-nano", "gpt-5", "chatgpt-4o-latest", "ft:gpt-4o-mini:acme::x"})
    EXPECT_EQ(encoding_for_model(m), Encoding::o200k_base) << m;
  for (const char* m : {"gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "text-embedding-3-small",
                        "llama3:8b", "demo", ""})
    EXPECT_EQ(encoding_for_model(m), Encoding::cl100k_base) << m;
}

// Every cl100k/o200k model of tiktoken's own table (model_to_encoding.json in the package).
TEST(Names, ModelsAsInTiktokensTable) {
  const std::string path = kSourceDir + "/data/tokenizer/node_modules/tiktoken/model_to_encoding.json";
  const std::string text = read(path);
  // Fetched with the rank files (the same npm package): skipped without them, as they are.
  if (text.empty()) GTEST_SKIP() << path << " not fetched: run scripts/fetch-tokenizer.sh (npm ci in data/tokenizer)";
  std::size_t checked = 0;
  const json::value table = json::parse(text);
  for (const auto& [model, enc] : table.as_object()) {
    const auto e = encoding_from_name(std::string_view(enc.as_string()));
    if (!e) continue;  // p50k_base, r50k_base, gpt2: older models, counted as cl100k_base
    EXPECT_EQ(encoding_for_model(model), *e) << model;
    ++checked;
  }
  EXPECT_GT(checked, 70u);
}

TEST(Counter, LoadDirFallsBackPerEncoding) {
  std::string warnings;
  const Counter none = Counter::load_dir("/nonexistent-dir", &warnings);
  EXPECT_FALSE(none.exact(Encoding::cl100k_base));
  EXPECT_FALSE(none.exact(Encoding::o200k_base));
  EXPECT_NE(warnings.find("cl100k_base: token counts are estimates"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("o200k_base"), std::string::npos) << warnings;
  EXPECT_EQ(none.count("hello world", Encoding::o200k_base), estimate("hello world", Encoding::o200k_base));

  SLUICE_REQUIRE_RANK_FILES();
  const Counter real = Counter::load_dir(kRankDir, &warnings);
  EXPECT_TRUE(real.exact(Encoding::cl100k_base)) << warnings << " Run scripts/fetch-tokenizer.sh.";
  EXPECT_TRUE(real.exact(Encoding::o200k_base)) << warnings << " Run scripts/fetch-tokenizer.sh.";
  EXPECT_EQ(warnings, "");
  EXPECT_EQ(real.count("hello world", Encoding::cl100k_base), 2u);
}

TEST(Counter, RepeatedTextsGiveTheBpesCountsForEachEncoding) {
  SLUICE_REQUIRE_RANK_FILES();
  Counter counter;
  for (const Encoding e : kEncodings) counter.set(e, ranks(e));
  // More distinct texts than the per-thread cache has slots, each counted three times in
  // both encodings: every answer (first, cached, or after its slot was taken) is the BPE's.
  std::vector<std::string> texts;
  for (int i = 0; i < 6000; ++i) texts.push_back("message " + std::to_string(i * 7919) + std::string(i % 13, '!'));
  texts.push_back("");
  texts.push_back(std::string(3000, 'x') + " \u4e2d\u6587 ok");
  for (int round = 0; round < 3; ++round) {
    for (const auto& t : texts) {
      for (const Encoding e : kEncodings) {
        ASSERT_EQ(counter.count(t, e), ranks(e)->count(t)) << ename(e) << " round " << round << ": " << t;
      }
    }
  }
}

TEST(Chat, CookbookFormulaMatchesTiktoken) {
  SLUICE_REQUIRE_RANK_FILES();
  Counter counter;
  for (const Encoding e : kEncodings) counter.set(e, ranks(e));
  for (const auto& c : fixture().at("chat").as_array()) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c.at("messages").as_array()) {
      const auto& o = m.as_object();
      ChatMessage msg{o.at("role").as_string(), o.at("content").as_string(), {}};
      if (const auto* n = o.if_contains("name")) msg.name = n->as_string();
      msgs.push_back(msg);
    }
    for (const Encoding e : kEncodings) {
      EXPECT_EQ(count_chat(counter, e, msgs), static_cast<std::size_t>(c.at(ename(e)).to_number<std::int64_t>()))
          << ename(e);
    }
  }
  // The cookbook's example prompt: 129 tokens with cl100k_base, 124 with o200k_base.
  EXPECT_EQ(fixture().at("chat").as_array()[0].at("cl100k_base").to_number<std::int64_t>(), 129);
  EXPECT_EQ(fixture().at("chat").as_array()[0].at("o200k_base").to_number<std::int64_t>(), 124);
}

TEST(Chat, FormulaOverEstimates) {
  const Counter estimator;
  const ChatMessage msgs[] = {{"system", "Be brief.", ""}, {"user", "hi", "bob"}};
  const auto est = [](std::string_view s) { return estimate(s, Encoding::o200k_base); };
  EXPECT_EQ(count_chat(estimator, Encoding::o200k_base, msgs),
            3 + (3 + est("system") + est("Be brief.")) + (3 + est("user") + est("hi") + 1 + est("bob")));
  EXPECT_EQ(count_chat(estimator, Encoding::o200k_base, {}), 3u);
}

// ---------------------------------------------------------------------------------------
// Estimator

TEST(Estimate, BasicProperties) {
  for (const Encoding e : kEncodings) {
    EXPECT_EQ(estimate("", e), 0u);
    EXPECT_GE(estimate("a", e), 1u);
    EXPECT_GE(estimate(" ", e), 1u);
    EXPECT_GE(estimate("\xff", e), 1u);
    EXPECT_EQ(estimate("12345", e), 2u);  // digits go in groups of three
    // Appending text never lowers the estimate.
    std::string s;
    std::size_t last = 0;
    for (const char* part : {"Hello", ",", " world", "!", " 你好", "世界", " 😀", "\n\n", "  x", "123456"}) {
      s += part;
      const std::size_t now = estimate(s, e);
      EXPECT_GE(now, last) << s;
      last = now;
    }
  }
  EXPECT_EQ(estimate("hello world"), estimate("hello world", Encoding::cl100k_base));
}

TEST(Estimate, ScalesAndStaysBounded) {
  const std::string para =
      "The gateway reserves the estimated prompt tokens at admission, 1,024 at most; "
      "然后在结算时按实际用量退还。 Ценa: 12.50 €. if (x) { return f(y); }\n\n";
  for (const Encoding e : kEncodings) {
    const std::size_t one = estimate(para, e);
    std::string many;
    for (int i = 0; i < 100; ++i) many += para;
    // No state carries across paragraphs: 100 copies cost 100 times one, give or take rounding.
    EXPECT_NEAR(static_cast<double>(estimate(many, e)), 100.0 * static_cast<double>(one), 100.0);
    // Never more than one token per byte; never zero for non-empty text.
    for (const std::string_view s : {std::string_view("x"), std::string_view("\xff\xfe\xfd"),
                                     std::string_view("😀😀"), std::string_view("\n\n\n"),
                                     std::string_view(para)}) {
      EXPECT_GE(estimate(s, e), 1u);
      EXPECT_LE(estimate(s, e), s.size()) << s;
    }
  }
}

// The estimator is calibrated on other text (docs/tokenizer.md); on the fixture's varied
// texts it stays within a loose bound of the real count. bench/tokenizer_error measures it.
TEST(Estimate, CloseToBpeOnFixtureTexts) {
  SLUICE_REQUIRE_RANK_FILES();
  for (const Encoding e : kEncodings) {
    const auto bpe = ranks(e);
    ASSERT_TRUE(bpe);
    for (const char* name : {"english-prose", "chinese", "code", "json", "numbers", "whitespace"}) {
      for (const auto& c : fixture().at("long").as_array()) {
        if (c.at("name").as_string() != name) continue;
        const std::string text = text_of(c.as_object());
        const double exact = static_cast<double>(bpe->count(text));
        const double est = static_cast<double>(estimate(text, e));
        EXPECT_NEAR(est / exact, 1.0, 0.25) << ename(e) << " " << name << ": estimate " << est << " exact " << exact;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Concurrency

TEST(Threads, ConcurrentCountsAgree) {
  SLUICE_REQUIRE_RANK_FILES();
  std::vector<std::string> texts;
  for (const auto& c : fixture().at("long").as_array()) texts.push_back(text_of(c.as_object()));
  for (const auto& c : fixture().at("short").as_array()) texts.push_back(text_of(c.as_object()));
  Counter counter;
  for (const Encoding e : kEncodings) counter.set(e, ranks(e));
  std::vector<std::size_t> want;
  for (const auto& t : texts)
    for (const Encoding e : kEncodings) want.push_back(counter.count(t, e));

  constexpr int kThreads = 6;
  std::vector<std::vector<std::size_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        got[t].clear();
        // Start at a different text per thread so the threads do not run in lockstep.
        for (std::size_t k = 0; k < texts.size(); ++k) {
          (void)counter.count(texts[(k + t * 7) % texts.size()], Encoding::o200k_base);
        }
        for (const auto& text : texts)
          for (const Encoding e : kEncodings) got[t].push_back(counter.count(text, e));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], want) << "thread " << t;
}
