#include "model/rpc.h"

#include <ggml-rpc.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#ifndef _WIN32
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

namespace llamux::rpc {

namespace {

// ---- registry of groups + monitor ------------------------------------------------------

// Never destroyed: the monitor and parked threads wait on them until the process ends, and
// glibc's pthread_cond_destroy at exit would wait for those waiters forever.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::weak_ptr<Group>> groups;
  // Dead groups stay here: their leaked buffers keep the healthy servers' connections open,
  // and a later model must share those connections (a server serves one at a time).
  std::vector<std::shared_ptr<Group>> dead;
  std::map<std::string, int> generation;  // endpoint -> connections that failed on it
  uint64_t epoch = 0;        // RPC failures seen (abort callback)
  std::string lastFailure;   // the last failure's ggml message
  bool monitorStarted = false;
};
State &S() {
  static State *s = new State();
  return *s;
}
std::atomic<bool> g_clientInUse{false};

bool SplitEndpoint(const std::string &endpoint, std::string *host, int *port) {
  size_t pos = endpoint.find(':');  // ggml-rpc splits at the first ':' too
  if (pos == std::string::npos || pos == 0) return false;
  *host = endpoint.substr(0, pos);
  const std::string p = endpoint.substr(pos + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  *port = std::stoi(p);
  return *port > 0 && *port < 65536;
}

// The connection name of an endpoint now (see Group::keys). Caller holds S().mu.
std::string KeyLocked(const std::string &endpoint) {
  auto it = S().generation.find(endpoint);
  return it == S().generation.end() || it->second == 0 ? endpoint : endpoint + "#" + std::to_string(it->second + 1);
}

// burnt: the endpoints whose connection failed (parked); they get a new connection name.
void MarkDead(const std::shared_ptr<Group> &g, const std::string &why, const std::vector<std::string> &burnt) {
  {
    std::lock_guard<std::mutex> lk(g->mu);
    if (g->dead->load()) return;
    g->message = why;
    g->dead->store(true, std::memory_order_release);
    // Listeners run under the group lock so RemoveListener can wait for a running one.
    for (auto &l : g->listeners) l.second(why);
    g->listeners.clear();
  }
  std::lock_guard<std::mutex> lk(S().mu);
  for (const auto &ep : burnt) S().generation[ep]++;
  S().dead.push_back(g);
}

std::vector<std::shared_ptr<Group>> LiveGroups() {
  std::vector<std::shared_ptr<Group>> out;
  std::lock_guard<std::mutex> lk(S().mu);
  for (auto it = S().groups.begin(); it != S().groups.end();) {
    if (auto g = it->lock()) {
      out.push_back(std::move(g));
      ++it;
    } else {
      it = S().groups.erase(it);
    }
  }
  return out;
}

// One RPC failure happened somewhere (a dispatcher thread parked itself): find the groups
// whose servers are gone. When every endpoint still answers (a server restarted at once),
// every group is marked dead: its connection is gone either way, and a typed error beats a
// request that waits forever.
void Investigate(const std::string &failure) {
  for (int attempt = 0; attempt < 3; attempt++) {
    bool found = false;
    for (auto &g : LiveGroups()) {
      if (g->IsDead()) continue;
      for (const auto &ep : g->endpoints) {
        std::string why = Probe(ep, 1500, false);
        // A timeout proves nothing: a busy server's one-slot listen backlog drops new
        // connections. A refused or unreachable connection does.
        if (!why.empty() && why.find("no answer") == std::string::npos) {
          MarkDead(g, "RPC server " + ep + " failed: " + why, {ep});
          found = true;
          break;
        }
      }
    }
    if (found) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto &g : LiveGroups()) {
    if (!g->IsDead()) MarkDead(g, "an RPC connection failed (" + failure + ")", g->endpoints);
  }
}

void MonitorMain() {
  uint64_t seen = 0;
  for (;;) {
    std::string failure;
    {
      std::unique_lock<std::mutex> lk(S().mu);
      S().cv.wait(lk, [&] { return S().epoch != seen; });
      seen = S().epoch;
      failure = S().lastFailure;
    }
    Investigate(failure);
  }
}

// ggml_abort's callback. A failure inside ggml-rpc in a process that uses RPC devices parks
// the failing thread instead of aborting; anything else keeps ggml's behaviour (print, then
// ggml_abort calls abort()).
void OnGgmlAbort(const char *message) {
  if (g_clientInUse.load() && message != nullptr && std::strstr(message, "ggml-rpc") != nullptr) {
    {
      std::lock_guard<std::mutex> lk(S().mu);
      S().epoch++;
      S().lastFailure = message;
      while (!S().lastFailure.empty() && (S().lastFailure.back() == '\n' || S().lastFailure.back() == ' ')) S().lastFailure.pop_back();
    }
    S().cv.notify_all();
    std::fprintf(stderr, "llamux: %s; this connection's thread is parked and its model fails with RPC_UNAVAILABLE\n",
                 message);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
  }
  std::fprintf(stderr, "%s\n", message != nullptr ? message : "ggml_abort");
}

void EnsureMonitor() {
  std::lock_guard<std::mutex> lk(S().mu);
  if (S().monitorStarted) return;
  S().monitorStarted = true;
  g_clientInUse.store(true);
  ggml_set_abort_callback(&OnGgmlAbort);
  std::thread(MonitorMain).detach();
}

ggml_backend_reg_t RpcReg() { return ggml_backend_reg_by_name("RPC"); }

#ifndef _WIN32
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::string Errno(const char *what) { return std::string(what) + ": " + std::strerror(errno); }

bool SendAll(int fd, const void *data, size_t n) {
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool RecvAll(int fd, void *data, size_t n) {
  char *p = static_cast<char *>(data);
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
#endif

}  // namespace

std::string Group::Message() {
  std::lock_guard<std::mutex> lk(mu);
  return message;
}

uint64_t Group::AddListener(std::function<void(const std::string &)> fn) {
  std::unique_lock<std::mutex> lk(mu);
  if (dead->load()) {
    std::string m = message;
    fn(m);
    return 0;
  }
  uint64_t id = nextListener++;
  listeners.emplace_back(id, std::move(fn));
  return id;
}

void Group::RemoveListener(uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lk(mu);
  for (auto it = listeners.begin(); it != listeners.end(); ++it) {
    if (it->first == id) {
      listeners.erase(it);
      return;
    }
  }
}

std::string Probe(const std::string &endpoint, int timeoutMs, bool handshake) {
  std::string host;
  int port = 0;
  if (!SplitEndpoint(endpoint, &host, &port)) return "not a host:port endpoint";
#ifdef _WIN32
  (void)timeoutMs;
  return "";
#else
  addrinfo hints{};
  hints.ai_family = AF_INET;  // ggml-rpc's client connects over IPv4
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return "cannot resolve host \"" + host + "\"";
  }
  Fd s;
  s.fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (s.fd < 0) {
    freeaddrinfo(res);
    return Errno("socket");
  }
  int flags = fcntl(s.fd, F_GETFL, 0);
  fcntl(s.fd, F_SETFL, flags | O_NONBLOCK);
  int rc = connect(s.fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) return Errno("connection failed");
  if (rc != 0) {
    pollfd p{s.fd, POLLOUT, 0};
    int n = poll(&p, 1, timeoutMs);
    if (n == 0) return "no answer within " + std::to_string(timeoutMs) + " ms (connect)";
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (n < 0 || err != 0) return std::string("connection failed: ") + std::strerror(err != 0 ? err : errno);
  }
  fcntl(s.fd, F_SETFL, flags);
  if (!handshake) return "";
  timeval tv{timeoutMs / 1000, (timeoutMs % 1000) * 1000};
  setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // HELLO: | cmd (1 byte) | size (8 bytes) | conn_caps (24 zero bytes: plain TCP) |
  // answer: | size (8 bytes) = 28 | major minor patch pad | conn_caps (24) |
  constexpr size_t kCaps = 24;
  uint8_t req[1 + 8 + kCaps] = {};
  req[0] = 14;  // RPC_CMD_HELLO (fixed by the protocol)
  uint64_t size = kCaps;
  std::memcpy(req + 1, &size, sizeof(size));
  if (!SendAll(s.fd, req, sizeof(req))) return "connection closed during the RPC handshake";
  uint64_t rspSize = 0;
  uint8_t rsp[4 + kCaps] = {};
  if (!RecvAll(s.fd, &rspSize, sizeof(rspSize))) {
    return "no RPC handshake answer within " + std::to_string(timeoutMs) +
           " ms (not a ggml RPC server, or one busy serving another client)";
  }
  if (rspSize != sizeof(rsp) || !RecvAll(s.fd, rsp, sizeof(rsp))) return "not a ggml RPC server (unexpected handshake answer)";
  if (rsp[0] != RPC_PROTO_MAJOR_VERSION || rsp[1] > RPC_PROTO_MINOR_VERSION) {
    return "RPC protocol " + std::to_string(rsp[0]) + "." + std::to_string(rsp[1]) + "." + std::to_string(rsp[2]) +
           " does not match this client's " + std::to_string(RPC_PROTO_MAJOR_VERSION) + "." +
           std::to_string(RPC_PROTO_MINOR_VERSION) + " (run the same llamux version on both sides)";
  }
  return "";
#endif
}

std::shared_ptr<Group> NewGroup(const std::vector<std::string> &endpoints) {
  EnsureMonitor();
  auto group = std::make_shared<Group>();
  group->endpoints = endpoints;
  std::lock_guard<std::mutex> lk(S().mu);
  S().groups.push_back(group);
  return group;
}

bool Connect(Group &group, std::vector<ggml_backend_dev_t> *devices, std::string *error) {
  ggml_backend_reg_t reg = RpcReg();
  if (reg == nullptr) {
    *error = "this build of llamux has no RPC backend (libggml-rpc is missing next to llamux.node)";
    return false;
  }
  using add_server_t = ggml_backend_reg_t (*)(const char *);
  auto addServer = reinterpret_cast<add_server_t>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_rpc_add_server"));
  if (addServer == nullptr) {
    *error = "the RPC backend does not export ggml_backend_rpc_add_server";
    return false;
  }
  // Connections this process already holds (another model's, or a dead model's to a server
  // that is fine): ggml-rpc shares one connection per name, and a second HELLO would wait for
  // that connection to end.
  std::vector<std::string> connected;
  auto live = LiveGroups();
  {
    std::lock_guard<std::mutex> lk(S().mu);
    group.keys.clear();
    for (const auto &ep : group.endpoints) group.keys.push_back(KeyLocked(ep));
    for (auto &g : live) {
      if (g.get() != &group && !g->IsDead()) connected.insert(connected.end(), g->keys.begin(), g->keys.end());
    }
    for (auto &g : S().dead) connected.insert(connected.end(), g->keys.begin(), g->keys.end());
  }
  for (size_t i = 0; i < group.endpoints.size(); i++) {
    const std::string &ep = group.endpoints[i];
    // A held connection needs no probe (and a TCP probe would only sit in the busy server's
    // one-slot listen backlog).
    if (std::find(connected.begin(), connected.end(), group.keys[i]) != connected.end()) continue;
    std::string why = Probe(ep, 3000, true);
    if (!why.empty()) {
      *error = "RPC server " + ep + " is unavailable: " + why;
      return false;
    }
  }
  for (size_t i = 0; i < group.endpoints.size(); i++) {
    ggml_backend_reg_t r = addServer(group.keys[i].c_str());  // a failure here parks this thread (see rpc.h)
    size_t n = r != nullptr ? ggml_backend_reg_dev_count(r) : 0;
    if (n == 0) {
      *error = "RPC server " + group.endpoints[i] + " exposes no devices";
      return false;
    }
    for (size_t i = 0; i < n; i++) devices->push_back(ggml_backend_reg_dev_get(r, i));
  }
  return true;
}

bool RunGuarded(const std::shared_ptr<Group> &group, std::function<void()> fn, int timeoutMs) {
  if (group->IsDead()) return false;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([fn = std::move(fn), done] {
    fn();
    done->store(true, std::memory_order_release);
  }).detach();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!done->load(std::memory_order_acquire)) {
    if (group->IsDead()) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      Fail(group, "an RPC server did not answer within " + std::to_string(timeoutMs / 1000) + " s");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void Fail(const std::shared_ptr<Group> &group, const std::string &why) { MarkDead(group, why, group->endpoints); }

bool WaitUnlessDead(Group &group, const std::function<bool()> &done) {
  for (;;) {
    if (done()) return true;
    if (group.IsDead()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool StartServer(const std::string &host, int port, const std::string &cacheDir, int threads,
                 std::vector<ServerDevice> *exposed, std::string *error, std::function<void()> onExit) {
  ggml_backend_reg_t reg = RpcReg();
  if (reg == nullptr) {
    *error = "this build of llamux has no RPC backend (libggml-rpc is missing next to llamux.node)";
    return false;
  }
  using start_t = void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *);
  auto start = reinterpret_cast<start_t>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_rpc_start_server"));
  if (start == nullptr) {
    *error = "the RPC backend does not export ggml_backend_rpc_start_server";
    return false;
  }
  // GPUs when there are any, else the CPU (what llama.cpp's rpc-server does).
  auto devs = std::make_shared<std::vector<ggml_backend_dev_t>>();
  ggml_backend_dev_t cpu = nullptr;
  for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    auto t = ggml_backend_dev_type(d);
    if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) devs->push_back(d);
    if (t == GGML_BACKEND_DEVICE_TYPE_CPU && cpu == nullptr) cpu = d;
  }
  if (devs->empty() && cpu != nullptr) devs->push_back(cpu);
  if (devs->empty()) {
    *error = "no device to expose (no CPU backend loaded)";
    return false;
  }
  for (auto d : *devs) {
    ServerDevice sd;
    sd.name = ggml_backend_dev_name(d);
    sd.description = ggml_backend_dev_description(d);
    ggml_backend_dev_memory(d, &sd.memoryFree, &sd.memoryTotal);
    exposed->push_back(sd);
  }
#ifndef _WIN32
  {
    // Bind once here so a busy port or a bad address is an error the caller sees (ggml's
    // server only prints one and returns). SO_REUSEADDR as ggml does, so it can rebind.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
      *error = "cannot resolve host \"" + host + "\"";
      return false;
    }
    Fd s;
    s.fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    int one = 1;
    setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc = bind(s.fd, res->ai_addr, res->ai_addrlen);
    int err = errno;
    freeaddrinfo(res);
    if (rc != 0) {
      *error = "cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(err);
      return false;
    }
  }
#endif
  size_t nThreads = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  std::string endpoint = host + ":" + std::to_string(port);
  std::thread([=] {
    start(endpoint.c_str(), cacheDir.empty() ? nullptr : cacheDir.c_str(), nThreads, devs->size(), devs->data());
    std::fflush(stdout);
    if (onExit) onExit();
  }).detach();
  return true;
}

}  // namespace llamux::rpc
