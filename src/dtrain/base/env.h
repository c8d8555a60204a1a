// Environment knobs (DTRAIN_*), parsed strictly: a malformed value is an error naming the variable,
// never silently the default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain::env {

std::optional<std::string> get(const char* name);
std::int64_t get_int(const char* name, std::int64_t fallback);
double get_double(const char* name, double fallback);
bool get_bool(const char* name, bool fallback);

}  // namespace dtrain::env
