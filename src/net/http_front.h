// HttpFront (net layer, internal to the servers): the connection side of `tlr serve` and
// `tlr ui` over plain HTTP/1.1. cpp-httplib still parses, routes and writes responses, but it no
// longer owns connections: httplib's own model pins one thread per connection for its whole life
// (idle keep-alive and a slow sender included), so 64 idle devices or 64 slowloris sockets took
// every thread. Here
//
//   - one poller thread (epoll) holds every connection that is idle or still sending its request,
//     reading what arrives without blocking; a connection costs a socket and its buffered bytes,
//     never a thread;
//   - a request goes to a fixed pool of worker threads only once its header and whole body are in
//     memory, so a worker is busy only while a handler runs (or streams its reply); a reply the
//     client does not read yet waits in memory (up to 1 MiB; past it the worker waits for the
//     client, up to write_timeout_s) and the poller sends it, reading that connection's next
//     request only once it is sent: clients that do not read hold no worker;
//   - every request must arrive within request_timeout_s of its first byte (408 otherwise), an idle
//     keep-alive connection is closed after idle_timeout_s, headers are capped (431) and so is the
//     body, chunked or not (413, decided while reading: nothing past the limit is kept);
//   - past max_connections a new connection gets 503 and is closed; the listen backlog is a real
//     one (ListenBacklog), so a burst of connects is queued by the kernel, not reset.
//
// Refusals are JSON like every other error ({"error": {"code", "message", "type"}}) and close the
// connection after the unread rest of the request has been drained for a moment, so the client
// reads the answer instead of a reset.
//
// Thread-safety: configure (routes, handlers) before Listen; Close() once, after httplib's stop()
// and the listening thread have returned. Handlers run on the worker threads, concurrently.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "util/status.h"

namespace tlr {

class Metrics;

// True for exactly an IPv4 address in 127.0.0.0/8, ::1 and "localhost" (any case); not for names
// that merely start like one ("127.attacker.example").
bool IsLoopbackHost(const std::string& host);

// Which of `keys` an Authorization header ("Bearer KEY") carries, or -1 (compared in constant
// time over each key's length).
int BearerKeyIndex(const std::string& header, const std::vector<std::string>& keys);

struct FrontLimits {
  int max_connections = 1024;       // open connections; the next one gets 503
  int workers = 64;                 // requests handled at once
  double request_timeout_s = 10;    // a request's header and body must arrive within this (408)
  double idle_timeout_s = 30;       // an idle keep-alive connection is closed after this
  double write_timeout_s = 30;      // a reply that cannot be sent for this long ends the connection
  uint64_t max_header_bytes = 64 << 10;  // request line + headers (431)
  uint64_t max_body_bytes = 4 << 20;     // decoded body, Content-Length or chunked (413)
  std::string max_body_flag = "--max-body";  // the option setting it, named in the 413 ("": none)
};

// Where a request stands in a connection's buffer (ScanRequest). A complete request is handed to
// httplib byte for byte; an error is answered by the front itself.
struct RequestScan {
  enum class Kind { kIncomplete, kComplete, kError };
  Kind kind = Kind::kIncomplete;
  size_t length = 0;                // kComplete: bytes of the request, header and body
  int status = 0;                   // kError: 400, 413 or 431
  std::string code, message;        // kError: the JSON error's code and message
  bool expect_continue = false;     // header complete and "Expect: 100-continue" was sent
};

// Progress of ScanRequest through one request, so that bytes arriving one at a time are not
// rescanned from the start. Reset (= {}) after each request.
struct ScanState {
  size_t line_start = 0;            // header: the next line to look at
  size_t header_len = 0;            // 0: the header is not complete yet
  bool needs_body = false;          // POST, PUT, PATCH: a body must be framed
  bool has_length = false, chunked = false, expect_continue = false;
  uint64_t content_length = 0;
  size_t chunk_pos = 0;             // chunked: where the next chunk-size line starts
  uint64_t decoded = 0;             // chunked: body bytes so far
};

// Scans buf (which starts at a request's first byte) for one complete request within limits.
RequestScan ScanRequest(std::string_view buf, const FrontLimits& limits, ScanState* state);

// The listen backlog the servers ask for (the kernel caps it at net.core.somaxconn).
constexpr int kDefaultListenBacklog = 1024;

// Binds http to host:port (0: any free port; *bound_port gets it), sets the listen backlog and
// starts httplib's accept loop on *thread. Works for every httplib::Server, HttpFront or not.
// SO_REUSEADDR only: a restart may rebind at once, but a second server on the same port fails
// (cpp-httplib's default adds SO_REUSEPORT, which would silently split the clients between two
// processes, each with its own sessions).
Status BindAndListen(httplib::Server* http, const std::string& host, int port, int backlog, int* bound_port,
                     std::thread* thread);

class HttpFront : public httplib::Server {
 public:
  // metrics (optional, not owned) gets tlr_http_connections and tlr_http_refused_total{reason}.
  explicit HttpFront(FrontLimits limits, Metrics* metrics = nullptr);
  ~HttpFront() override;

  // Closes every connection and joins the poller and the workers (a handler still running is
  // waited for). Call after stop() and after the listening thread has returned.
  void Close();

  int open_connections() const { return open_.load(); }

  // For a handler that waits long before it answers (a queued generation): true when the client
  // of the request this worker thread is handling has closed its connection (or reset it).
  // False on any other thread. A client that only shut down its sending side counts as gone.
  static bool CurrentClientGone();
  // Seconds since the request this worker thread handles was complete (it may have waited for a
  // free worker): time its client has already spent waiting. 0 on any other thread.
  static double CurrentRequestAge();
  // For a handler on a worker thread: the connection closes once this reply is sent (a reply
  // without a length, which only the end of the connection delimits). No effect elsewhere.
  static void CloseAfterReply();

 private:
  struct Conn;
  class ConnStream;
  using ConnPtr = std::unique_ptr<Conn>;

  // Called by httplib's accept loop (through an inline task queue) for each accepted socket.
  bool process_and_close_socket(socket_t sock) override;

  void PollerLoop();
  void WorkerLoop();
  void Serve(ConnPtr c);
  // Hands a connection to the poller (new, back from a worker, or to be drained and closed).
  void ToPoller(ConnPtr c);
  void Dispatch(ConnPtr c);
  // Reads what is available; false when the connection is finished (closed, refused).
  bool ReadAvailable(Conn* c);
  // Scans c's buffer: true when a complete request is waiting (then c->request_len is set);
  // answers and marks c for draining on a malformed or oversized request.
  bool CheckRequest(Conn* c);
  void Refuse(Conn* c, int status, const std::string& code, const std::string& message);
  void Destroy(ConnPtr c);
  void CountRefusal(const char* reason);
  // Sends what the socket takes now of c->out without waiting; false on an error (reset, closed).
  static bool SendPending(Conn* c);

  FrontLimits limits_;
  Metrics* metrics_;
  std::atomic<int> open_{0};
  std::atomic<bool> closing_{false};
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: new connections in incoming_
  std::thread poller_;
  std::vector<std::thread> workers_;

  std::mutex mu_;  // guards incoming_, ready_, closed_
  std::condition_variable ready_cv_;
  std::vector<ConnPtr> incoming_;  // for the poller
  std::deque<ConnPtr> ready_;      // complete requests, for the workers
  bool closed_ = false;
};

}  // namespace tlr
