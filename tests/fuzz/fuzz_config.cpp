// The config loader (config::load_string) on arbitrary YAML, with an empty environment
// (as the unit tests' fake env) and a file access that reads nothing: keys_file, ca_file
// and tokenizer_dir all look absent. The loader writes nothing.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "gateway_config.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;  // configs are small; keeps yaml-cpp's recursion in bounds
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  auto r = config::load_string(yaml, fuzz::no_env, fuzz::kNoDir, fuzz::kNoFiles);
  if (r.ok()) {
    if (!r.errors.empty()) fuzz::fail("config accepted with errors", yaml);
    volatile std::size_t n = config::describe(*r.config).size();
    (void)n;
  } else {
    if (r.errors.empty()) fuzz::fail("config refused without an error", yaml);
    for (const auto& e : r.errors) (void)e.to_string();
  }
  return 0;
}
