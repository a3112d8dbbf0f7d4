#pragma once
// The configuration reference, generated from the key tables of the sections: one table
// per YAML map (the top level, each section, each kind of list entry). `sluice
// config-reference` prints it; docs/configuration.md holds it between markers
// (<!-- BEGIN config-reference NAME --> ... <!-- END config-reference -->) and a unit test
// fails when the document is out of date.
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

struct KeyDoc {
  std::string key;
  std::string type;
  std::string default_value;
  std::string allowed;
  std::string doc;
};

struct TableDoc {
  std::string name;  // where the map is: "timeouts", "models[].sim", "keys[]"
  std::vector<KeyDoc> keys;
  // The environment overrides ("environment"): each key is a variable, its doc what it
  // overrides; shown as | Variable | Overrides |.
  bool variables = false;
};

// Every table, top level first, in the order the sections are read.
const std::vector<TableDoc>& reference_tables();
// One table as Markdown (header row and one row per key).
std::string reference_markdown(const TableDoc& t);
// Every table, each under a "### `name`" heading.
std::string reference_markdown();
// `doc` with every generated block (markers at the start of a line) replaced by the
// current table. `error` names a block
// whose table does not exist, or a table that has no block (then the result is `doc`).
std::string update_reference(std::string_view doc, std::string& error);

}  // namespace sluice::config
