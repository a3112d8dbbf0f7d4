// `params` and `options`: maps from a request parameter's name to its allowed range. An
// absent section installs the built-in list; a present one replaces it.
#include <string>

#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Table<Range>& range_table() {
  static const Table<Range> t{
      "params.<name>",
      {
          number("min", &Range::min, -kTwo53, kTwo53, "Smallest value allowed.").with_default("−2^53"),
          number("max", &Range::max, -kTwo53, kTwo53, "Largest value allowed; not below `min`.").with_default("2^53"),
          boolean("integer", &Range::integer, "Only whole numbers."),
      }};
  return t;
}

}  // namespace

Ranges default_params() {
  return {
      {"temperature", {0, 2, false}},
      {"top_p", {0, 1, false}},
      {"max_tokens", {1, 131072, true}},
      {"max_completion_tokens", {1, 131072, true}},
      {"presence_penalty", {-2, 2, false}},
      {"frequency_penalty", {-2, 2, false}},
      {"n", {1, 1, true}},
      {"seed", {-kTwo53, kTwo53, true}},
  };
}

Ranges default_options() {
  return {
      {"num_ctx", {256, 131072, true}},
      {"num_predict", {-2, 131072, true}},
      {"num_gpu", {-1, 1024, true}},  // -1: every layer on the GPU (Ollama's default)
      {"num_batch", {1, 8192, true}},
      {"num_thread", {1, 1024, true}},
      {"temperature", {0, 2, false}},
      {"top_p", {0, 1, false}},
      {"top_k", {0, 1000, true}},
      {"repeat_penalty", {0, 2, false}},
      {"seed", {-kTwo53, kTwo53, true}},
      {"mirostat", {0, 2, true}},
  };
}

void read_ranges(Loader& l, const YAML::Node& n, const std::string& path, Ranges& out) {
  out.clear();
  if (n.IsNull()) return;
  if (!n.IsMap()) {
    l.error(path, l.line_of(n), std::string("expected a map of name: {min, max, integer}, got ") + kind_of(n));
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node key = it->first, val = it->second;
    if (val.IsNull()) l.note_null(val, l.line_of(key));
    if (!key.IsScalar() || key.Scalar().empty()) {
      l.error(path, l.line_of(key), "expected a parameter name");
      continue;
    }
    const std::string name = key.Scalar();
    const std::string rp = join(path, name);
    if (out.count(name)) {
      l.error(rp, l.line_of(key), "duplicate key");
      continue;
    }
    Range r{-kTwo53, kTwo53, false};
    if (!range_table().read(l, val, rp, r)) continue;
    if (r.min > r.max) {
      l.error(rp, l.line_of(val), "min (" + fmt_num(r.min) + ") is greater than max (" + fmt_num(r.max) + ")");
    }
    out.emplace(name, r);
  }
}

std::string describe_params(const Config& c) {
  return "params:     " + std::to_string(c.params.size()) + " checked, options: " + std::to_string(c.options.size()) +
         " allowed\n";
}

void params_reference(std::vector<TableDoc>& out) { out.push_back(range_table().doc()); }

}  // namespace sluice::config::detail
