// SseStream (net layer, with cpp-httplib): a Server-Sent Events response fed by a worker
// thread. The worker Pushes complete events and Finishes; httplib's thread sends them as they
// come. A client that goes away (a failed write) sets `cancelled`, which the worker polls to
// stop early. Used by the server's OpenAI streaming and by `tlr ui`.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "net/http_front.h"

namespace tlr {

class SseStream {
 public:
  std::atomic<bool> cancelled{false};
  std::thread worker;  // the producer; joined (or detached, if it holds the last reference)

  virtual ~SseStream() { StopWorker(); }
  // Cancels and waits for the worker; a derived class whose members the worker uses calls it
  // in its own destructor.
  void StopWorker() {
    cancelled = true;
    if (!worker.joinable()) return;
    // The worker may drop the last reference itself (the response was sent or abandoned
    // before it returned); a thread cannot join itself, so it is detached as it ends.
    if (worker.get_id() == std::this_thread::get_id()) worker.detach();
    else worker.join();
  }
  void Push(std::string event) {
    {
      std::lock_guard<std::mutex> l(mu_);
      chunks_.push_back(std::move(event));
    }
    cv_.notify_one();
  }
  void Finish() {
    {
      std::lock_guard<std::mutex> l(mu_);
      finished_ = true;
    }
    cv_.notify_one();
  }

  // Makes `res` send the stream's events. With heartbeat_s > 0, a comment line goes out after
  // that long without an event, so a closed connection is noticed while the worker waits. An
  // HTTP/1.1 client gets them chunked; an HTTP/1.0 one (which knows no chunks: curl --http1.0, a
  // proxy speaking 1.0 upstream) as they are, the end of the stream closing the connection.
  static void Serve(const httplib::Request& req, httplib::Response& res, std::shared_ptr<SseStream> s,
                    double heartbeat_s = 0) {
    res.set_header("Cache-Control", "no-cache");
    auto provide = [s, heartbeat_s](size_t, httplib::DataSink& sink) {
      std::unique_lock<std::mutex> l(s->mu_);
      auto ready = [&] { return !s->chunks_.empty() || s->finished_; };
      if (heartbeat_s > 0) {
        if (!s->cv_.wait_for(l, std::chrono::duration<double>(heartbeat_s), ready)) {
          l.unlock();
          static constexpr std::string_view kPing = ": ping\n\n";
          return s->Write(sink, kPing);
        }
      } else {
        s->cv_.wait(l, ready);
      }
      while (!s->chunks_.empty()) {
        std::string c = std::move(s->chunks_.front());
        s->chunks_.pop_front();
        l.unlock();
        if (!s->Write(sink, c)) return false;
        l.lock();
      }
      if (s->finished_) sink.done();
      return true;
    };
    auto release = [s](bool) { s->cancelled = true; };
    if (req.version == "HTTP/1.0") {
      res.set_header("Connection", "close");
      HttpFront::CloseAfterReply();
      res.set_content_provider("text/event-stream", std::move(provide), std::move(release));
    } else {
      res.set_chunked_content_provider("text/event-stream", std::move(provide), std::move(release));
    }
  }

 private:
  bool Write(httplib::DataSink& sink, std::string_view data) {
    if (sink.write(data.data(), data.size())) return true;
    cancelled = true;
    return false;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  bool finished_ = false;
};

}  // namespace tlr
