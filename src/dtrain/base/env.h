// Environment knobs (DTRAIN_*), parsed strictly: a malformed value is an error naming the variable,
// never silently the default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::env {

std::optional<std::string> get(const char* name);
std::int64_t get_int(const char* name, std::int64_t fallback);
double get_double(const char* name, double fallback);
bool get_bool(const char* name, bool fallback);

// For a child process (posix_spawn): this process's environment as "NAME=value" strings without
// the variables named in `drop`, to which the caller adds its own; and argv-style pointers into
// such strings, ending with nullptr (valid while `strings` lives and is not changed).
std::vector<std::string> environment_without(std::initializer_list<std::string_view> drop);
std::vector<char*> c_strings(const std::vector<std::string>& strings);

}  // namespace dtrain::env
