// The configuration reference, generated from the sections' key tables.
#include "config/reference.hpp"

#include <algorithm>

#include "config/schema.hpp"

namespace sluice::config {

namespace {

constexpr std::string_view kBegin = "<!-- BEGIN config-reference ";
constexpr std::string_view kEnd = "<!-- END config-reference -->";

// The next `marker` at the start of a line, from `pos`.
size_t find_line(std::string_view doc, std::string_view marker, size_t pos) {
  while (true) {
    const size_t at = doc.find(marker, pos);
    if (at == std::string_view::npos || at == 0 || doc[at - 1] == '\n') return at;
    pos = at + 1;
  }
}

std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

const std::vector<TableDoc>& reference_tables() {
  static const std::vector<TableDoc> tables = [] {
    std::vector<TableDoc> t;
    detail::server_reference(t);
    detail::keys_reference(t);
    detail::models_reference(t);
    detail::routing_reference(t);
    detail::params_reference(t);
    detail::admission_reference(t);
    detail::records_reference(t);
    detail::cache_reference(t);
    detail::guardrails_reference(t);
    // The environment overrides (applied after the file), by section.
    TableDoc env{"environment", {}, true};
    std::vector<detail::EnvDoc> vars;
    detail::server_env_reference(vars);
    detail::keys_env_reference(vars);
    detail::models_env_reference(vars);
    detail::admission_env_reference(vars);
    detail::records_env_reference(vars);
    for (auto& v : vars) env.keys.push_back({std::move(v.var), {}, {}, {}, std::move(v.overrides)});
    t.push_back(std::move(env));
    return t;
  }();
  return tables;
}

std::string reference_markdown(const TableDoc& t) {
  if (t.variables) {
    std::string out = "| Variable | Overrides |\n|---|---|\n";
    for (const auto& k : t.keys) out += "| `" + cell(k.key) + "` | " + cell(k.doc) + " |\n";
    return out;
  }
  std::string out = "| Key | Type | Default | Allowed | Meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : t.keys) {
    out += "| `" + cell(k.key) + "` | " + cell(k.type) + " | " + cell(k.default_value) + " | " + cell(k.allowed) +
           " | " + cell(k.doc) + " |\n";
  }
  return out;
}

std::string reference_markdown() {
  std::string out;
  for (const auto& t : reference_tables()) {
    out += "### `" + t.name + "`\n\n" + std::string(kBegin) + t.name + " -->\n" + reference_markdown(t) +
           std::string(kEnd) + "\n\n";
  }
  return out;
}

std::string update_reference(std::string_view doc, std::string& error) {
  error.clear();
  std::string out;
  std::vector<std::string> seen;
  size_t pos = 0;
  while (true) {
    const size_t b = find_line(doc, kBegin, pos);
    if (b == std::string_view::npos) break;
    const size_t name_end = doc.find(" -->", b + kBegin.size());
    const size_t line_end = doc.find('\n', b);
    if (name_end == std::string_view::npos || line_end == std::string_view::npos || name_end > line_end) {
      error = "malformed marker at offset " + std::to_string(b);
      return std::string(doc);
    }
    const std::string name(doc.substr(b + kBegin.size(), name_end - b - kBegin.size()));
    const size_t e = find_line(doc, kEnd, line_end);
    if (e == std::string_view::npos) {
      error = "no end marker after the block of '" + name + "'";
      return std::string(doc);
    }
    const TableDoc* table = nullptr;
    for (const auto& t : reference_tables()) {
      if (t.name == name) table = &t;
    }
    if (!table) {
      error = "a block names '" + name + "', which is not a table of the configuration";
      return std::string(doc);
    }
    seen.push_back(name);
    out.append(doc.substr(pos, line_end + 1 - pos));
    out += reference_markdown(*table);
    pos = e;
  }
  out.append(doc.substr(pos));
  for (const auto& t : reference_tables()) {
    if (std::find(seen.begin(), seen.end(), t.name) == seen.end()) {
      error = "no block for table '" + t.name + "' (add " + std::string(kBegin) + t.name + " --> ... " +
              std::string(kEnd) + ")";
      return std::string(doc);
    }
  }
  return out;
}

}  // namespace sluice::config
