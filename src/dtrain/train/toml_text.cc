#include "dtrain/train/toml_text.h"

#include <fmt/format.h>

#include <sstream>

namespace dtrain::train {

std::string toml_quote(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\u{:04x}", byte);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

const char* toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "a list";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

std::string toml_value_text(const toml::node& node) {
  if (const auto* s = node.as_string()) return toml_quote(s->get());
  if (node.is_table()) return "a table";
  std::ostringstream out;
  out << toml::toml_formatter{node, toml::format_flags::none};
  return out.str();
}

}  // namespace dtrain::train
