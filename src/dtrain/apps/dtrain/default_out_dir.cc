// The default folder of a run or sweep (commands.h).
#include <fmt/format.h>

#include <ctime>
#include <filesystem>

#include "commands.h"

namespace dtrain::apps {

std::string default_out_dir(const std::string& config_path, const std::string& prefix) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return (std::filesystem::path("runs") /
          fmt::format("{}{}-{}", prefix, std::filesystem::path(config_path).stem().string(), stamp))
      .string();
}

}  // namespace dtrain::apps
