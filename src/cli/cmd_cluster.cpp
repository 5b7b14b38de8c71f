// dsinfer cluster: a prefill/decode cluster on this machine: one `dsinfer router` and N + M
// `dsinfer serve --role prefill|decode` workers, all this same binary as real processes. Waits until every
// worker has registered with the router, forwards SIGINT/SIGTERM (router first, so in-flight requests can
// finish, then the workers), and never leaves a child behind: children die with it (PR_SET_PDEATHSIG).
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "router/http_client.h"
#include "server/default_model.h"

namespace dsinfer::cli {
namespace {

struct Child {
  std::string name;  // "router", "prefill worker 1", ...
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

pid_t spawn(const std::vector<std::string>& args, const sigset_t& blocked) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  DSINFER_CHECK(pid >= 0, "dsinfer cluster: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // Own process group: a terminal's ^C reaches the cluster only, which forwards it once. The child dies
    // with the cluster even when the cluster is killed with SIGKILL.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "dsinfer cluster: cannot run %s: %s\n", args[0].c_str(), std::strerror(errno));
    _exit(127);
  }
  return pid;
}

// A free TCP port on 127.0.0.1 (for --port 0: the router's port must be known to the workers up front).
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  DSINFER_CHECK(fd >= 0, "dsinfer cluster: socket: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  DSINFER_CHECK(ok, "dsinfer cluster: cannot find a free port");
  return ntohs(addr.sin_port);
}

// Reaps children that exited; returns the first newly exited one, or nullptr.
Child* reap(std::vector<Child>& children) {
  Child* first = nullptr;
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return first;
    for (Child& c : children) {
      if (c.pid != pid) continue;
      c.exited = true;
      c.status = status;
      if (!first) first = &c;
    }
  }
}

void signal_all(std::vector<Child>& children, int sig, bool router_only, bool workers_only) {
  for (size_t i = 0; i < children.size(); ++i) {
    if (children[i].exited) continue;
    if ((router_only && i != 0) || (workers_only && i == 0)) continue;
    kill(children[i].pid, sig);
  }
}

// Waits up to `timeout` for the chosen children to exit; true when they all did.
bool wait_exit(std::vector<Child>& children, std::chrono::milliseconds timeout, bool router_only) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    reap(children);
    bool all = true;
    for (size_t i = 0; i < children.size(); ++i)
      if (!children[i].exited && (!router_only || i == 0)) all = false;
    if (all) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void tear_down(std::vector<Child>& children, std::chrono::milliseconds grace) {
  signal_all(children, SIGTERM, /*router_only=*/true, false);
  if (!wait_exit(children, grace, /*router_only=*/true)) signal_all(children, SIGKILL, true, false);
  signal_all(children, SIGTERM, false, /*workers_only=*/true);
  if (!wait_exit(children, grace, false)) {
    signal_all(children, SIGKILL, false, false);
    wait_exit(children, std::chrono::seconds(10), false);
  }
}

int run_cluster(int argc, char** argv) {
  // Flags after "--" are `dsinfer serve` flags for every worker (engine, kv store, --threads, ...).
  std::vector<std::string> worker_flags;
  int own_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      own_argc = i;
      for (int j = i + 1; j < argc; ++j) worker_flags.emplace_back(argv[j]);
      break;
    }
  }
  Args args("cluster",
            "Run a prefill/decode cluster on this machine: `dsinfer router` plus N prefill and M decode workers\n"
            "(`dsinfer serve --role prefill|decode`), all real processes of this binary. Ready once every worker\n"
            "has registered; SIGINT/SIGTERM stop the router (in-flight requests finish) and then the workers.\n"
            "Flags after `--` go to every worker's `dsinfer serve` (e.g. -- --speculation --kv-budget-mib 512).");
  args.option("model", "DIR", "checkpoint directory (default: the embedded tiny model, as `serve`)");
  args.option("prefill", "N", "prefill workers", "1");
  args.option("decode", "M", "decode workers", "1");
  args.option("host", "ADDR", "address the router listens on", "127.0.0.1");
  args.option("port", "N", "the router's TCP port (0 picks a free one)", "8000");
  args.option("api-key", "KEY", "API key of the router and the workers (also from $DSINFER_API_KEY)");
  args.option("served-model-name", "NAMES", "names requests may give as \"model\" (the router's --served-model-name)");
  args.option("lease", "SECONDS", "the router's worker lease (--lease)", "3");
  args.option("progress-timeout", "SECONDS", "the router's per-call progress deadline (--progress-timeout; 0: off)",
              "300");
  args.option("start-timeout", "SECONDS", "time for every worker to load and register", "600");
  args.option("stop-timeout", "SECONDS", "on shutdown, time each stage (router, then workers) gets to exit", "30");
  if (!args.parse(own_argc, argv)) return args.exit_code();
  const int64_t n_prefill = args.get_int("prefill", 1, 256);
  const int64_t n_decode = args.get_int("decode", 1, 256);
  int64_t port = args.get_int("port", 0, 65535);
  if (port == 0) port = free_port();
  const auto start_timeout = std::chrono::milliseconds(args.get_int("start-timeout", 1, 86400) * 1000);
  const auto stop_timeout = std::chrono::milliseconds(args.get_int("stop-timeout", 1, 86400) * 1000);

  // The embedded model is made once here, before the children start (they would race to make it).
  std::string model_dir;
  if (auto dir = args.get_optional("model")) {
    model_dir = *dir;
  } else {
    std::printf("dsinfer cluster: using the embedded tiny model\n");
    model_dir = server::ensure_default_model(nullptr).dir;
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  sigprocmask(SIG_BLOCK, &signals, nullptr);

  const std::string router_url = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> common;
  if (auto key = args.get_optional("api-key")) common = {"--api-key", *key};
  std::vector<Child> children;
  {
    std::vector<std::string> cmd = {"dsinfer", "router", "--host", args.get("host"), "--port", std::to_string(port),
                                    "--lease", args.get("lease"), "--progress-timeout", args.get("progress-timeout")};
    if (args.has("model")) cmd.insert(cmd.end(), {"--model", model_dir});
    if (auto names = args.get_optional("served-model-name")) cmd.insert(cmd.end(), {"--served-model-name", *names});
    cmd.insert(cmd.end(), common.begin(), common.end());
    children.push_back({"router", spawn(cmd, signals)});
  }
  for (int64_t i = 0; i < n_prefill + n_decode; ++i) {
    const bool prefill = i < n_prefill;
    std::vector<std::string> cmd = {"dsinfer", "serve", "--role", prefill ? "prefill" : "decode", "--router",
                                    router_url, "--model", model_dir, "--port", "0"};
    cmd.insert(cmd.end(), common.begin(), common.end());
    cmd.insert(cmd.end(), worker_flags.begin(), worker_flags.end());
    const std::string name = std::string(prefill ? "prefill worker " : "decode worker ") +
                             std::to_string(prefill ? i + 1 : i - n_prefill + 1);
    children.push_back({name, spawn(cmd, signals)});
  }
  std::printf("dsinfer cluster: started the router (pid %d) and %lld prefill + %lld decode workers\n", children[0].pid,
              static_cast<long long>(n_prefill), static_cast<long long>(n_decode));
  std::fflush(stdout);

  // Ready when every worker holds a lease at the router; a child that exits first fails the start.
  const auto deadline = std::chrono::steady_clock::now() + start_timeout;
  const router::HttpUrl url = router::parse_http_url(router_url);
  const std::string api_key = common.empty() ? "" : common[1];
  for (;;) {
    if (Child* c = reap(children)) {
      std::fprintf(stderr, "dsinfer cluster: %s (pid %d) failed to start: %s (its output is above)\n",
                   c->name.c_str(), c->pid, describe_status(c->status).c_str());
      tear_down(children, stop_timeout);
      return 1;
    }
    siginfo_t info;
    timespec poll{0, 0};
    const int sig = sigtimedwait(&signals, &info, &poll);
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("dsinfer cluster: stopped before it was ready\n");
      tear_down(children, stop_timeout);
      return 1;
    }
    try {
      // A deadline, so a router that accepts but hangs still lets --start-timeout end the wait.
      const router::HttpReply r =
          router::http_exchange(url, "GET", "/internal/v1/workers", "", api_key, std::chrono::seconds(2));
      if (r.status == 200) {
        const auto j = nlohmann::json::parse(r.body);
        if (j.value("prefill", 0) >= n_prefill && j.value("decode", 0) >= n_decode) break;
      }
    } catch (const std::exception&) {
      // the router is not listening yet
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "dsinfer cluster: not every worker registered within --start-timeout\n");
      tear_down(children, stop_timeout);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("dsinfer cluster: listening on http://%s:%lld (%lld prefill + %lld decode workers registered)\n",
              args.get("host").c_str(), static_cast<long long>(port), static_cast<long long>(n_prefill),
              static_cast<long long>(n_decode));
  std::printf("dsinfer cluster: ready\n");
  std::fflush(stdout);

  for (;;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&signals, &info);
    if (sig == SIGCHLD) {
      while (Child* c = reap(children)) {
        std::fprintf(stderr, "dsinfer cluster: %s (pid %d) exited: %s\n", c->name.c_str(), c->pid,
                     describe_status(c->status).c_str());
        if (c == &children[0]) {  // without the router there is no cluster
          tear_down(children, stop_timeout);
          return 1;
        }
      }
      continue;
    }
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("dsinfer cluster: %s received, stopping the router, then the workers\n",
                  sig == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stdout);
      tear_down(children, stop_timeout);
      std::printf("dsinfer cluster: stopped\n");
      return 0;
    }
  }
}

}  // namespace
DSINFER_COMMAND("cluster", "run a router and prefill/decode workers on this machine", run_cluster);
}  // namespace dsinfer::cli
