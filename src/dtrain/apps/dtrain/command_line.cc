// The command line as typed (commands.h): what a supervised run restarts from.
#include <string>
#include <vector>

#include "commands.h"

namespace dtrain::apps {
namespace {
std::vector<std::string>& stored() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

void set_command_line(int argc, char** argv) { stored().assign(argv, argv + argc); }

const std::vector<std::string>& command_line() { return stored(); }

}  // namespace dtrain::apps
