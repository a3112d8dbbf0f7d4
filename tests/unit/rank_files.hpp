// The BPE rank files of the OpenAI encodings are fetched, not committed
// (scripts/fetch-tokenizer.sh). A test that needs them starts with
// SLUICE_REQUIRE_RANK_FILES(): without them it is skipped, saying how to fetch them.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "source_tree.hpp"
#include "tokenizer/tokenizer.hpp"

namespace sluice::test {

inline std::string rank_dir() { return source_path(std::string(tokenizer::kDefaultRankDir)); }

// Empty when both rank files are there, else which one is missing.
inline std::string missing_rank_file() {
  for (const auto e : {tokenizer::Encoding::cl100k_base, tokenizer::Encoding::o200k_base}) {
    const std::string f = rank_dir() + "/" + std::string(tokenizer::encoding_name(e)) + ".json";
    std::error_code ec;
    if (std::filesystem::file_size(f, ec) == 0 || ec) return f;
  }
  return {};
}

}  // namespace sluice::test

#define SLUICE_REQUIRE_RANK_FILES()                                                          \
  do {                                                                                       \
    if (const std::string missing_ = ::sluice::test::missing_rank_file(); !missing_.empty()) \
      GTEST_SKIP() << "tokenizer rank file " << missing_                                     \
                   << " not fetched: run scripts/fetch-tokenizer.sh (npm ci in data/tokenizer)"; \
  } while (0)
