#pragma once
// Range-checked request parameters (`params`) and Ollama options (`options`). Declared in
// config/sections/params.cpp.
#include <map>
#include <string>

namespace sluice::config {

// Allowed numeric range of a request option.
struct Range {
  double min = 0;
  double max = 0;
  bool integer = false;
};

using Ranges = std::map<std::string, Range, std::less<>>;

}  // namespace sluice::config
