// The dtrain command: parses flags into train::Config and runs a subcommand.
#include <cstdio>

int main() {
  std::puts("dtrain");
  return 0;
}
