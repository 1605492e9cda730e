// ggml's RPC backend (ggml-rpc), both sides, made safe for a long-lived client process.
//
// Client: a model loaded with rpcServers places layers on the devices of remote
// `llamux rpc-server` processes. ggml-rpc's client aborts the process when a server is
// unreachable or dies (GGML_ABORT in its connection code and RPC_STATUS_ASSERT in its
// dispatcher thread). llamux therefore
//   - probes every endpoint itself (TCP connect + the protocol's HELLO, with timeouts) before
//     handing it to ggml, so an unreachable server is RPC_UNAVAILABLE before loading;
//   - installs a ggml abort callback: an RPC failure, on whatever thread it happens, marks
//     the thread parked (it sleeps forever instead of aborting) and wakes the monitor;
//   - runs a monitor thread that probes the endpoints of every RPC group and marks the
//     groups with a dead endpoint dead; their listeners (contexts) then fail their requests
//     with RPC_UNAVAILABLE. Threads stuck waiting for the dead server (the engine thread in
//     llama_decode, a loader) are abandoned, and the model's memory is leaked, never freed
//     (freeing would wait on the dead server too).
// Server: StartServer runs ggml_backend_rpc_start_server on a thread of its own.
#pragma once
#include <ggml-backend.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace llamux::rpc {

// The RPC servers one model uses.
struct Group {
  std::vector<std::string> endpoints;
  // ggml-rpc's name for each endpoint's connection (it keeps one connection per name). After a
  // server failed, its endpoint gets a new name ("host:port#2"; ggml reads the port up to the
  // '#'), so a later model connects afresh instead of reusing the parked connection.
  std::vector<std::string> keys;
  std::shared_ptr<std::atomic<bool>> dead = std::make_shared<std::atomic<bool>>(false);
  std::mutex mu;  // guards message and listeners
  std::string message;  // why it died
  uint64_t nextListener = 1;
  std::vector<std::pair<uint64_t, std::function<void(const std::string &)>>> listeners;

  bool IsDead() const { return dead->load(std::memory_order_acquire); }
  std::string Message();
  // fn runs once on the monitor thread when the group dies (at once if already dead).
  uint64_t AddListener(std::function<void(const std::string &)> fn);
  // After this returns, the listener is not running and will not run.
  void RemoveListener(uint64_t id);
};

// "host:port" → a message saying why it cannot be used ("" when it is fine). With
// handshake, the server must answer the protocol's HELLO (a ggml RPC server serves one
// client at a time, so only probe a server this process is not connected to that way);
// without, a TCP connect is enough (the listen backlog answers while it is busy).
std::string Probe(const std::string &endpoint, int timeoutMs, bool handshake);

// A group for these endpoints, watched by the monitor (started on first use, with the
// abort callback). Create it before Connect, so a failure while connecting marks it dead.
std::shared_ptr<Group> NewGroup(const std::vector<std::string> &endpoints);

// Probes each endpoint of the group (with the handshake, unless this process already holds
// a live connection to it), then registers it with ggml-rpc and appends each server's
// devices to *devices. On failure *error names the endpoint (the caller reports
// RPC_UNAVAILABLE). Run it on a thread that may be abandoned (see WaitUnlessDead).
bool Connect(Group &group, std::vector<ggml_backend_dev_t> *devices, std::string *error);

// Runs fn (which frees or reads what lives on the servers) on a thread of its own and waits
// until it returns, the group dies, or timeoutMs passes (then the group is marked dead). True
// when fn returned. When it did not, fn's thread is abandoned: fn must own what it touches.
bool RunGuarded(const std::shared_ptr<Group> &group, std::function<void()> fn, int timeoutMs);

// Marks the group dead (its listeners run) unless it already is. Which connection failed is
// unknown here, so every endpoint of the group gets a new connection name.
void Fail(const std::shared_ptr<Group> &group, const std::string &why);

// Waits until done() is true or the group is dead; checks every few ms. True when done.
bool WaitUnlessDead(Group &group, const std::function<bool()> &done);

// Server side. Exposes the given devices (GPUs, or the CPU when there is none) on
// host:port from a native thread that lives until the process exits. Binds first, so a
// busy port fails here with *error set. onExit runs (on that thread) if ggml's server loop
// ever returns.
struct ServerDevice {
  std::string name, description;
  size_t memoryFree = 0, memoryTotal = 0;
};
bool StartServer(const std::string &host, int port, const std::string &cacheDir, int threads,
                 std::vector<ServerDevice> *exposed, std::string *error, std::function<void()> onExit);

}  // namespace llamux::rpc
