// infer: the command-line front end of libinfer. It uses only the public C
// API (include/infer/infer.h), like SQLite's shell uses only sqlite3.h. Each
// subcommand lives in its own cmd_*.cpp and registers itself (cli.h).
#include <algorithm>

#include "cli.h"

namespace {

void usage(std::FILE* f) {
  std::fprintf(f, "infer %s: LLM inference with libinfer\n\nusage: infer COMMAND [options]\n\ncommands:\n",
               infer_version());
  std::vector<cli::Command> sorted = cli::commands();
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  for (const cli::Command& c : sorted) std::fprintf(f, "  %-11s %s\n", c.name, c.usage);
  std::fprintf(f, "\nMODEL defaults to %s\n", cli::kDefaultModel);
  std::fprintf(f, "Every command that loads a model takes --backend auto|cpu|cuda (default auto: the best available)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("infer %s\n", infer_version());
    return 0;
  }
  for (const cli::Command& c : cli::commands()) {
    if (cmd != c.name) continue;
    try {
      return c.run(argc, argv);
    } catch (const cli::UsageError& e) {
      std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), e.msg.c_str());
      return 2;
    } catch (const cli::ApiError& e) {
      std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), e.msg.c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "infer: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
