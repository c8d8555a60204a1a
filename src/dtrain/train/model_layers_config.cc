#include "dtrain/train/model_layers_config.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/train/toml_text.h"

namespace dtrain::train {
namespace {

nn::LayerList parse_list(const toml::node& node, const std::string& where, const std::string& in) {
  const auto* array = node.as_array();
  if (array == nullptr) {
    throw ConfigError(fmt::format(
        "config key '{}'{} must be a list of layer tables ([[{}]], each with a kind), got {} {}",
        where, in, nn::layer_table_header(where), toml_type_name(node), toml_value_text(node)));
  }
  nn::LayerList layers;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const std::string place = fmt::format("{}[{}]", where, i);
    const auto* table = (*array)[i].as_table();
    if (table == nullptr) {
      throw ConfigError(fmt::format("{}{} must be a layer table ([[{}]] with a kind), got {} {}",
                                    place, in, nn::layer_table_header(where),
                                    toml_type_name((*array)[i]), toml_value_text((*array)[i])));
    }
    nn::LayerSpec spec;
    if (const auto* kind = table->get("kind")) {
      const auto* s = kind->as_string();
      if (s == nullptr) {
        throw ConfigError(fmt::format("{}{}: kind must be a string such as \"linear\", got {} {}",
                                      place, in, toml_type_name(*kind), toml_value_text(*kind)));
      }
      spec.kind = s->get();
    }
    const std::string label = fmt::format("{} ({}){}", place, spec.kind, in);
    for (const auto& [key_node, value] : *table) {
      const std::string key(key_node.str());
      if (key == "kind") continue;
      if (key == "body" || key == "shortcut") {
        (key == "body" ? spec.body : spec.shortcut) = parse_list(value, place + "." + key, in);
        continue;
      }
      if (const auto* v = value.as_integer()) {
        spec.params[key] = v->get();
      } else if (const auto* f = value.as_floating_point()) {
        spec.params[key] = f->get();
      } else if (const auto* b = value.as_boolean()) {
        spec.params[key] = b->get();
      } else if (const auto* s = value.as_string()) {
        spec.params[key] = s->get();
      } else {
        throw ConfigError(
            fmt::format("{}: parameter '{}' must be a number, a boolean or a string, got {} {}",
                        label, key, toml_type_name(value), toml_value_text(value)));
      }
    }
    layers.push_back(std::move(spec));
  }
  return layers;
}

std::string value_text(const nn::LayerParam& value) {
  struct Visitor {
    std::string operator()(std::int64_t v) const { return fmt::format("{}", v); }
    std::string operator()(double v) const {
      // Shortest text that reads back as the same double, with a '.' or an exponent (a float).
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      if (std::isnan(v)) return "nan";
      std::string text = fmt::format("{}", v);
      if (text.find_first_of(".e") == std::string::npos) text += ".0";
      return text;
    }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return toml_quote(v); }
  };
  return std::visit(Visitor{}, value);
}

void write_list(const nn::LayerList& layers, const std::string& path, std::string& out) {
  for (const auto& spec : layers) {
    out += fmt::format("\n[[{}]]\nkind = {}\n", path, toml_quote(spec.kind));
    for (const auto& [key, value] : spec.params) {
      out += fmt::format("{} = {}\n", key, value_text(value));
    }
    write_list(spec.body, path + ".body", out);
    write_list(spec.shortcut, path + ".shortcut", out);
  }
}

}  // namespace

nn::LayerList parse_model_layers(const toml::node& node, const std::string& source) {
  const std::string in = source.empty() ? "" : " in " + source;
  nn::LayerList layers = parse_list(node, "model.layer", in);
  nn::check_layer_list(layers, "model.layer", source);
  return layers;
}

std::string model_layers_toml(const nn::LayerList& layers) {
  std::string out;
  write_list(layers, "model.layer", out);
  return out;
}

}  // namespace dtrain::train
