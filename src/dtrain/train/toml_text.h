// How the config's errors and resolved.toml write TOML values: one place for the config file's
// keys (config.cc) and its [[model.layer]] tables (model_layers_config.cc), so both say "must be
// an integer, got a string \"ten\"" the same way.
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>

namespace dtrain::train {

// `text` as a TOML basic string: quoted, with '"', '\', newlines, tabs and control bytes escaped.
std::string toml_quote(std::string_view text);

// A node's type in words: "a string", "an integer", "a float", "a boolean", "a list", "a table",
// "a date/time".
const char* toml_type_name(const toml::node& node);

// A node's value as written (strings quoted; a table is "a table").
std::string toml_value_text(const toml::node& node);

}  // namespace dtrain::train
