// The source tree, found at run time. It is not compiled in: an absolute path on the command
// line would make every test object miss the compiler cache in a clone in another folder
// (docs/building.md). ctest sets SLUICE_SOURCE_DIR (tests/unit/CMakeLists.txt); a test binary
// run by hand finds the tree above itself (build*/tests/unit/test_<lib>).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace sluice::test {

inline const std::string& source_dir() {
  static const std::string dir = [] {
    if (const char* env = std::getenv("SLUICE_SOURCE_DIR"); env && *env) return std::string(env);
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
    for (; !ec && p.has_relative_path(); p = p.parent_path()) {
      if (std::filesystem::exists(p / "src/common/reason.hpp", ec)) return p.string();
    }
    return std::string(".");
  }();
  return dir;
}

// A file of the source tree by its path inside it ("config/sluice.example.yaml").
inline std::string source_path(const std::string& relative) { return source_dir() + "/" + relative; }

}  // namespace sluice::test
