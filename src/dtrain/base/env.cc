#include "dtrain/base/env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "dtrain/base/error.h"

extern char** environ;

namespace dtrain::env {

std::vector<std::string> environment_without(std::initializer_list<std::string_view> drop) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool dropped = false;
    for (const std::string_view d : drop) dropped = dropped || name == d;
    if (!dropped) out.emplace_back(entry);
  }
  return out;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::int64_t get_int(const char* name, std::int64_t fallback) {
  const auto text = get(name);
  if (!text) return fallback;
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size()) {
    throw ConfigError(fmt::format("environment variable {}='{}' is not an integer", name, *text));
  }
  return value;
}

double get_double(const char* name, double fallback) {
  const auto text = get(name);
  if (!text) return fallback;
  char* end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  if (end != text->c_str() + text->size()) {
    throw ConfigError(fmt::format("environment variable {}='{}' is not a number", name, *text));
  }
  return value;
}

bool get_bool(const char* name, bool fallback) {
  const auto text = get(name);
  if (!text) return fallback;
  const std::string_view v = *text;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw ConfigError(fmt::format(
      "environment variable {}='{}' is not a boolean; accepted: 1/0, true/false, yes/no, on/off",
      name, v));
}

}  // namespace dtrain::env
