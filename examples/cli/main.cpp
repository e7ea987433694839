// infer: the command-line front end of libinfer. It uses only the public C
// API (include/infer/infer.h), like SQLite's shell uses only sqlite3.h. Each
// subcommand lives in its own cmd_*.cpp and registers itself (cli.h).
#include <limits.h>
#include <signal.h>

#include <algorithm>
#include <atomic>

#include "cli.h"

namespace cli {

namespace {
volatile sig_atomic_t g_interrupted = 0;
// When the first SIGINT came (CLOCK_MONOTONIC), so that a second one can be
// told from a duplicate of the first.
struct timespec g_first_sigint {};

// The first SIGINT asks the run to stop (its statistics still print); a
// second one ends the program at once. One Ctrl-C can arrive twice: a
// wrapper such as timeout(1) forwards it to its child and then to its whole
// process group, the child included, so a second SIGINT within 300 ms of the
// first counts as the same one. Only async-signal-safe calls here.
void on_sigint(int) {
  struct timespec now {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (!g_interrupted) {
    g_first_sigint = now;
    g_interrupted = 1;
    return;
  }
  const long long ms = (now.tv_sec - g_first_sigint.tv_sec) * 1000LL + (now.tv_nsec - g_first_sigint.tv_nsec) / 1000000;
  if (ms < 300) return;
  signal(SIGINT, SIG_DFL);
  raise(SIGINT);
}

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}
}  // namespace

bool interrupted() { return g_interrupted != 0; }

void catch_interrupt() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;  // a second Ctrl-C ends the program
  sa.sa_flags = 0;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

// $INFER_SHARED_DIR/models/stories260K.gguf; else a `shared/models/` beside
// the checkout the executable was built in (build/bin/infer -> ../../../shared)
// or any folder above the executable; else the installed copy
// (PREFIX/share/infer/models); else the historical ../shared relative to the
// current directory, which the error message then names.
std::string default_model() {
  const std::string name = "models/stories260K.gguf";
  if (const char* d = std::getenv("INFER_SHARED_DIR"); d && *d) return std::string(d) + "/" + name;
  std::string dir = exe_dir();
  if (!dir.empty()) {
    if (is_file(dir + "/../share/infer/" + name)) return dir + "/../share/infer/" + name;
    for (int up = 0; up < 5 && !dir.empty(); ++up) {
      if (is_file(dir + "/shared/" + name)) return dir + "/shared/" + name;
      if (is_file(dir + "/../shared/" + name)) return dir + "/../shared/" + name;
      const size_t slash = dir.rfind('/');
      dir = slash == std::string::npos || slash == 0 ? "" : dir.substr(0, slash);
    }
  }
  return "../shared/" + name;
}

void print_command_help(const Command& c, std::FILE* f) {
  std::fprintf(f, "infer %s: %s\n\nusage: %s\n", c.name, c.summary, c.synopsis);
  if (c.flags && !c.flags->empty()) {
    std::fprintf(f, "\noptions:\n");
    for (const Flag& fl : *c.flags) {
      std::string left = std::string(fl.names) + (fl.arg ? std::string(" ") + fl.arg : "");
      std::string right = fl.help;
      if (fl.def) right += std::string(" (default: ") + fl.def + ")";
      if (left.size() > 28) std::fprintf(f, "  %s\n  %-28s  %s\n", left.c_str(), "", right.c_str());
      else std::fprintf(f, "  %-28s  %s\n", left.c_str(), right.c_str());
    }
  }
  std::fprintf(f, "  %-28s  %s\n", "-h, --help", "this help");
  if (c.notes) std::fprintf(f, "\n%s\n", c.notes);
}

}  // namespace cli

namespace {

std::vector<cli::Command> sorted_commands() {
  std::vector<cli::Command> sorted = cli::commands();
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  return sorted;
}

void usage(std::FILE* f) {
  std::fprintf(f, "infer %s: LLM inference with libinfer\n\nusage: infer COMMAND [options]\n\ncommands:\n",
               infer_version());
  for (const cli::Command& c : sorted_commands()) std::fprintf(f, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(f, "\n`infer help COMMAND` or `infer COMMAND --help` lists every option of a command with its default.\n");
  std::fprintf(f, "MODEL defaults to %s\n", cli::default_model().c_str());
}

const cli::Command* find_command(const std::string& name) {
  for (const cli::Command& c : cli::commands())
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    if (cmd == "help" && argc > 2) {
      const cli::Command* c = find_command(argv[2]);
      if (!c) {
        std::fprintf(stderr, "infer help: unknown command '%s'\n\n", argv[2]);
        usage(stderr);
        return 2;
      }
      cli::print_command_help(*c, stdout);
      return 0;
    }
    usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("infer %s\n", infer_version());
    return 0;
  }
  const cli::Command* c = find_command(cmd);
  if (!c) {
    std::fprintf(stderr, "infer: unknown command '%s'\n\n", cmd.c_str());
    usage(stderr);
    return 2;
  }
  std::string error;
  int code = 1;
  try {
    return c->run(argc, argv);
  } catch (const cli::HelpRequested&) {
    cli::print_command_help(*c, stdout);
    return 0;
  } catch (const cli::UsageError& e) {
    error = e.msg + "\n(see infer " + cmd + " --help)";
    code = 2;
  } catch (const cli::ApiError& e) {
    error = e.msg;
  } catch (const cli::RankError& e) {
    cli::tp_state().rank = e.rank;
    error = e.msg;
  } catch (const std::exception& e) {
    error = e.what();
  }
  const cli::TpState tp = cli::tp_state();
  if (tp.on && tp.rank > 0) {
    std::fprintf(stderr, "infer: rank %d: %s\n", tp.rank, error.c_str());
    code = 1;
  } else {
    std::fprintf(stderr, "infer %s: %s\n", cmd.c_str(), error.c_str());
  }
  if (tp.on) {
    // A --tp job: end now, without the exit handlers (MPI's finalization
    // would wait for the other ranks); the launcher then ends the job.
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(code);
  }
  return code;
}
