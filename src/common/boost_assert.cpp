// Boost's assertion handler for the builds that keep assertions (Debug, ASan, fuzz; the
// release build defines NDEBUG and compiles BOOST_ASSERT away). Every Boost assertion still
// aborts, with the one exception below, which is a false assertion in Beast's parser.
//
// Beast 1.81's chunk parser asserts `n >= 5` when it resumes a final chunk, but a peer can
// deliver "0\r\n" then "\r" then "\n" in three reads: the second call sees 4 bytes. The code
// after the assertion handles it (it waits for the blank line), so only the assertion is
// wrong; Beast fixed it in 1.86 (boostorg/beast pull request 2861). Without this exception a
// client or an upstream splitting its last chunk that way aborts a debug or sanitizer build.
// Replayed by the fuzz seed tests/fuzz/corpus/http_response/final-chunk-split, and from both
// sides of the gateway by tests/integration/hostile.test.mjs and http_hardening.test.mjs
// (run on the ASan build too).
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace boost {

namespace {

bool known_false(std::string_view expr, std::string_view file) {
  return expr == "n >= 5" && file.ends_with("boost/beast/http/impl/basic_parser.ipp");
}

[[noreturn]] void fail(const char* expr, const char* msg, const char* function, const char* file, long line) {
  std::fprintf(stderr, "%s:%ld: %s: Assertion `%s' failed%s%s\n", file, line, function, expr, msg ? ": " : "",
               msg ? msg : "");
  std::abort();
}

}  // namespace

void assertion_failed(const char* expr, const char* function, const char* file, long line) {
  if (known_false(expr, file)) return;
  fail(expr, nullptr, function, file, line);
}

void assertion_failed_msg(const char* expr, const char* msg, const char* function, const char* file, long line) {
  if (known_false(expr, file)) return;
  fail(expr, msg, function, file, line);
}

}  // namespace boost
