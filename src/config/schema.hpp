#pragma once
// Internal to the config library: how a section declares its keys. One row per key
// carries the YAML key, the struct field (a member pointer), the type, the bounds, the
// default and one line of documentation; from the table follow
//   - the allow-list (an unknown key is refused, listing the table's keys),
//   - the reading of every key, with the range errors and their lines,
//   - the startup banner of simple sections (Table::banner),
//   - the reference tables of docs/configuration.md (reference.hpp),
//   - its environment override, if it has one (from_env): the same reader, the same
//     checks, errors at "env VAR"; the table of overrides in docs/configuration.md.
// A key whose reading depends on others (a secret given literally or by variable, a
// route's backend keys) is declared with custom(...) and no reader: the section's code
// reads it. tests/unit/config/reference_test.cpp checks that a wrong value of every
// declared key is refused at its path, so a key cannot be accepted and then ignored.
#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/loader.hpp"
#include "config/reference.hpp"

namespace sluice::config::detail {

template <class S>
using Reader = std::function<bool(Loader&, const YAML::Node&, const std::string& path, S&)>;

template <class S>
struct Key {
  std::string_view name;
  std::string type;     // as the reference shows it: "integer", "duration", "`a` or `b`"
  std::string allowed;  // "1–1000000", "≥ 0", "> 0"; "" = any value of the type
  std::string doc;      // one line
  std::string dflt;     // the default as the reference shows it; "" = show(S{})
  Reader<S> read;       // empty: read by the section's code (by_code)
  std::function<std::string(const S&)> show;  // the value in the reference and the banner
  std::string label;    // banner label; "" = not in the banner
  std::string unit;     // banner unit, e.g. " B"
  int order = 0;        // keys are read by (order, row): a key another depends on is read first
  bool required = false;
  bool in_short_form = false;  // a backend key also accepted at a route's top level
  std::string required_hint;  // appended to "missing required key 'name'"
  std::string env;            // the environment variable that overrides it ("" = none)
  std::string env_note;       // after the key's name in the overrides' table
  bool env_empty = false;     // the variable set to "" counts (otherwise as unset)
  Reader<S> env_after;        // what else the override sets, once its value was read

  // Builders, each returning the changed row.
  Key with_default(std::string d) && { dflt = std::move(d); return std::move(*this); }
  Key banner(std::string l, std::string u = {}) && { label = std::move(l); unit = std::move(u); return std::move(*this); }
  Key read_at(int o) && { order = o; return std::move(*this); }
  Key by_code() && { read = nullptr; return std::move(*this); }
  Key short_form() && { in_short_form = true; return std::move(*this); }
  // Absent: "missing required key 'name'" + hint, at the map.
  Key needed(std::string hint = {}) && {
    required = true;
    required_hint = std::move(hint);
    if (dflt.empty()) dflt = "— (required)";
    return std::move(*this);
  }
  // A check run after the value was read (cross checks of one key, rewrites).
  Key then(std::function<bool(Loader&, const YAML::Node&, const std::string&, S&)> after) && {
    read = [inner = std::move(read), after = std::move(after)](Loader& l, const YAML::Node& n, const std::string& p,
                                                               S& s) { return inner(l, n, p, s) && after(l, n, p, s); };
    return std::move(*this);
  }
  Key shown(std::function<std::string(const S&)> f) && { show = std::move(f); return std::move(*this); }
  // Overridden by environment variable `var` after the file, through the same reader;
  // `note` follows the key in the overrides' table.
  Key from_env(std::string var, std::string note = {}) && {
    env = std::move(var);
    env_note = std::move(note);
    return std::move(*this);
  }
  Key env_empty_counts() && { env_empty = true; return std::move(*this); }  // "" is a value, not unset
  Key env_then(Reader<S> after) && { env_after = std::move(after); return std::move(*this); }
};

// A row of the environment overrides' table in docs/configuration.md.
struct EnvDoc {
  std::string var;
  std::string overrides;  // Markdown
};

// A table of keys for one YAML map read into S.
template <class S>
struct Table {
  std::string name;
  std::vector<Key<S>> keys;
  std::vector<std::string_view> names;  // accepted keys, in order (the allow-list)

  Table(std::string n, std::vector<Key<S>> k) : name(std::move(n)), keys(std::move(k)) {
    for (const auto& key : keys) names.push_back(key.name);
  }
  // Accepts `extra` keys too (read by the section's code), inserted after key `after`.
  Table&& accepting(std::string_view after, std::vector<std::string_view> extra) && {
    auto it = names.begin();
    while (it != names.end() && *it != after) ++it;
    if (it != names.end()) ++it;
    names.insert(it, extra.begin(), extra.end());
    return std::move(*this);
  }

  // Reads map `n` (at `path`) into `s`: unknown and repeated keys are errors, every key
  // present is read. `out` (optional) receives the map's fields for the section's code.
  // False when `n` is not a map.
  bool read(Loader& l, const YAML::Node& n, const std::string& path, S& s, Fields* out = nullptr) const {
    Fields f;
    if (!l.fields(n, path, names, f)) return false;
    read_fields(l, n, f, path, s, false);
    if (out) *out = std::move(f);
    return true;
  }

  // Reads the keys of `f` (the fields of map `n`) that have a reader and whose order is
  // in [lo, hi], by (order, row); with `short_only`, only those also accepted at a route's
  // top level. A section's code may read between two such ranges.
  void read_fields(Loader& l, const YAML::Node& n, const Fields& f, const std::string& path, S& s,
                   bool short_only, int lo = INT_MIN, int hi = INT_MAX) const {
    std::vector<const Key<S>*> todo;
    for (const auto& key : keys) {
      if (key.order >= lo && key.order <= hi && (!short_only || key.in_short_form)) todo.push_back(&key);
    }
    std::stable_sort(todo.begin(), todo.end(), [](const Key<S>* a, const Key<S>* b) { return a->order < b->order; });
    for (const Key<S>* key : todo) {
      if (auto v = Loader::get(f, key->name)) {
        if (key->read) key->read(l, *v, join(path, key->name), s);
      } else if (key->required) {
        l.fail(path, n, "missing required key '" + std::string(key->name) + "'" + key->required_hint);
      }
    }
  }

  // The environment overrides of the keys that have one (read after the file).
  void apply_env(Loader& l, S& s) const {
    Loader::EnvScope scope(l);
    for (const auto& key : keys) {
      if (key.env.empty() || !key.read) continue;
      auto v = key.env_empty ? l.getenv_raw(key.env) : l.getenv(key.env);
      if (!v) continue;
      // Spaces around a value are dropped (as a YAML scalar's are), unless "" counts.
      const YAML::Node n(key.env_empty ? *v : std::string(trim(*v)));
      const std::string where = "env " + key.env;
      const std::size_t errors = l.error_count();
      if (key.read(l, n, where, s) && l.error_count() == errors && key.env_after) key.env_after(l, n, where, s);
    }
  }
  // Their rows of the overrides' table; `path`: where the map is in the file ("", "redis").
  void env_doc(std::vector<EnvDoc>& out, const std::string& path) const {
    for (const auto& key : keys) {
      if (key.env.empty()) continue;
      out.push_back({key.env, "`" + join(path, key.name) + "`" + (key.env_note.empty() ? "" : " " + key.env_note)});
    }
  }

  // "label value, label value" over the keys with a banner label.
  std::string banner(const S& s) const {
    std::string out;
    for (const auto& key : keys) {
      if (key.label.empty()) continue;
      out += (out.empty() ? "" : ", ") + key.label + " " + key.show(s) + key.unit;
    }
    return out;
  }

  TableDoc doc() const {
    TableDoc t{name, {}};
    static const S& defaults = *new S();  // the declared defaults; never freed
    for (const auto& key : keys) {
      std::string d = key.dflt;
      if (d.empty() && key.show) {
        d = key.show(defaults);
        d = d.empty() ? "`\"\"`" : "`" + d + "`";
      }
      t.keys.push_back({std::string(key.name), key.type, d, key.allowed, key.doc});
    }
    return t;
  }
};

// ---------------------------------------------------------------------------------------
// Enumerations: the names a key accepts and the value each stands for.

template <class E>
struct Choice {
  std::string_view name;
  E value;
  bool listed = true;  // false: an accepted alias not shown in messages and the reference
};

template <class E>
struct Enum {
  std::string_view noun;            // "provider": "unknown provider 'x' (expected a, b or c)"
  std::vector<Choice<E>> choices;
  std::string message = {};         // replaces that message when set

  std::string expected(bool code = false) const {
    std::vector<std::string_view> shown;
    for (const auto& c : choices) {
      if (c.listed) shown.push_back(c.name);
    }
    std::string out;
    for (size_t i = 0; i < shown.size(); ++i) {
      if (i) out += i + 1 == shown.size() ? " or " : ", ";
      out += code ? "`" + std::string(shown[i]) + "`" : std::string(shown[i]);
    }
    return out;
  }
  std::optional<E> parse(std::string_view s) const {
    for (const auto& c : choices) {
      if (c.name == s) return c.value;
    }
    return std::nullopt;
  }
  std::string_view name(E v) const {
    for (const auto& c : choices) {
      if (c.value == v) return c.name;
    }
    return "?";
  }
  std::string error(std::string_view got) const {
    if (!message.empty()) return message;
    return "unknown " + std::string(noun) + " " + q(got) + " (expected " + expected() + ")";
  }
  // Reads a string naming a choice; an unknown name is an error at `n`.
  bool read(Loader& l, const YAML::Node& n, const std::string& path, E& out) const {
    std::string s;
    if (!l.get_string(n, path, s)) return false;
    if (auto v = parse(s)) {
      out = *v;
      return true;
    }
    l.fail(path, n, error(s));
    return false;
  }
};

// A list of strings (aliases, request fields, keywords); each entry read by `add`.
template <class Add>
bool read_list(Loader& l, const YAML::Node& v, const std::string& p, const char* what, Add add) {
  if (v.IsNull()) return true;
  if (!v.IsSequence()) {
    l.fail(p, v, std::string("expected a list of ") + what + ", got " + kind_of(v));
    return false;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const YAML::Node a = v[i];
    const std::string ap = index(p, i);
    std::string name;
    if (l.get_string(a, ap, name)) add(a, ap, std::move(name));
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Row factories, by type.

template <class S>
Key<S> make_key(std::string_view name, std::string type, std::string allowed, std::string doc, std::string dflt,
                Reader<S> read, std::function<std::string(const S&)> show) {
  Key<S> k;
  k.name = name;
  k.type = std::move(type);
  k.allowed = std::move(allowed);
  k.doc = std::move(doc);
  k.dflt = std::move(dflt);
  k.read = std::move(read);
  k.show = std::move(show);
  return k;
}

inline std::string int_allowed(long long lo, long long hi) {
  if (hi == kMaxI64) return "≥ " + std::to_string(lo);
  return std::to_string(lo) + "–" + std::to_string(hi);
}

inline std::string duration_allowed(Millis min) {
  if (min.count() == 0) return "≥ 0";
  if (min.count() == 1) return "> 0";
  return "≥ " + fmt_duration(min);
}

template <class S, class T>
Key<S> integer(std::string_view name, T S::*m, long long lo, long long hi, std::string doc) {
  return make_key<S>(name, "integer", int_allowed(lo, hi), std::move(doc), {},
          [m, lo, hi](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return l.get_int(n, p, lo, hi, s.*m); },
          [m](const S& s) { return std::to_string(s.*m); });
}

template <class S>
Key<S> number(std::string_view name, double S::*m, double lo, double hi, std::string doc) {
  return make_key<S>(name, "number", fmt_num(lo) + "–" + fmt_num(hi), std::move(doc), {},
          [m, lo, hi](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return l.get_double(n, p, lo, hi, s.*m); },
          [m](const S& s) { return fmt_num(s.*m); });
}

template <class S>
Key<S> boolean(std::string_view name, bool S::*m, std::string doc) {
  return make_key<S>(name, "boolean", "", std::move(doc), {},
          [m](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return l.get_bool(n, p, s.*m); },
          [m](const S& s) { return std::string(s.*m ? "true" : "false"); });
}

template <class S>
Key<S> duration(std::string_view name, Millis S::*m, Millis min, std::string doc) {
  return make_key<S>(name, "duration", duration_allowed(min), std::move(doc), {},
          [m, min](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return l.get_duration(n, p, min, s.*m); },
          [m](const S& s) { return fmt_duration(s.*m); });
}

template <class S>
Key<S> text(std::string_view name, std::string S::*m, std::string doc) {
  return make_key<S>(name, "string", "", std::move(doc), {},
          [m](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return l.get_string(n, p, s.*m); },
          [m](const S& s) { return s.*m; });
}

template <class S, class E>
Key<S> choice(std::string_view name, E S::*m, const Enum<E>& e, std::string doc) {
  return make_key<S>(name, e.expected(true), "", std::move(doc), {},
          [m, &e](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return e.read(l, n, p, s.*m); },
          [m, &e](const S& s) { return std::string(e.name(s.*m)); });
}

// A nested map read into member `m` with its own table; an empty value keeps the defaults.
template <class S, class Sub>
Key<S> section(std::string_view name, Sub S::*m, const Table<Sub>& t, std::string doc) {
  return make_key<S>(name, "map", "", std::move(doc), "see `" + t.name + "`",
          [m, &t](Loader& l, const YAML::Node& n, const std::string& p, S& s) {
            return n.IsNull() || t.read(l, n, p, s.*m);
          },
          {});
}

// A nested map read into the optional member `m` with its own table: absent, none; given
// (`{}` too), its values over the defaults.
template <class S, class Sub>
Key<S> optional_section(std::string_view name, std::optional<Sub> S::*m, const Table<Sub>& t, std::string doc) {
  return make_key<S>(name, "map", "", std::move(doc), "none",
          [m, &t](Loader& l, const YAML::Node& n, const std::string& p, S& s) {
            Sub v;
            if (!n.IsNull() && !t.read(l, n, p, v)) return false;
            s.*m = std::move(v);
            return true;
          },
          {});
}

// A nested map whose keys are fields of S itself (limits, admin: top-level fields of Config).
template <class S>
Key<S> group(std::string_view name, const Table<S>& t, std::string doc) {
  return make_key<S>(name, "map", "", std::move(doc), "see `" + t.name + "`",
          [&t](Loader& l, const YAML::Node& n, const std::string& p, S& s) { return n.IsNull() || t.read(l, n, p, s); },
          {});
}

// Anything else: the reader is code (a list, a map of names, a value with its own syntax).
template <class S>
Key<S> custom(std::string_view name, std::string type, std::string dflt, std::string doc, Reader<S> read = nullptr) {
  return make_key<S>(name, std::move(type), "", std::move(doc), std::move(dflt), std::move(read), {});
}

// The tables of each section, for the reference (sections/*.cpp).
void server_reference(std::vector<TableDoc>& out);
void keys_reference(std::vector<TableDoc>& out);
void models_reference(std::vector<TableDoc>& out);
void params_reference(std::vector<TableDoc>& out);
void routing_reference(std::vector<TableDoc>& out);
void admission_reference(std::vector<TableDoc>& out);
void records_reference(std::vector<TableDoc>& out);
void cache_reference(std::vector<TableDoc>& out);
void guardrails_reference(std::vector<TableDoc>& out);
// The environment overrides of each section: the declared ones (Key::from_env) and those
// its code reads.
void server_env_reference(std::vector<EnvDoc>& out);
void keys_env_reference(std::vector<EnvDoc>& out);
void models_env_reference(std::vector<EnvDoc>& out);
void admission_env_reference(std::vector<EnvDoc>& out);
void records_env_reference(std::vector<EnvDoc>& out);

}  // namespace sluice::config::detail
