#include "server/web_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <memory>

#include <httplib.h>

#include "net/server_json.h"

namespace tlr {

namespace {

void Isolate(httplib::Response& res) {
  res.set_header("Cross-Origin-Opener-Policy", "same-origin");
  res.set_header("Cross-Origin-Embedder-Policy", "require-corp");
  res.set_header("Cross-Origin-Resource-Policy", "same-origin");
  res.set_header("X-Content-Type-Options", "nosniff");
}

struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void WebFileVersion(const std::string& path, int64_t* size, int64_t* mtime) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    *size = -1;
    *mtime = 0;
    return;
  }
  *size = static_cast<int64_t>(st.st_size);
  *mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string WebContentType(const std::string& name) {
  auto ends = [&](const char* ext) {
    const std::string e(ext);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js") || ends(".mjs")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".json")) return "application/json";
  if (ends(".wasm")) return "application/wasm";
  return "application/octet-stream";
}

bool IsWebFile(const std::vector<WebFile>& files, const std::string& path) {
  return std::any_of(files.begin(), files.end(), [&](const WebFile& f) { return f.path == path; });
}

void ServeWebFiles(httplib::Server* http, const std::vector<WebFile>& files, int max_downloads) {
  auto running = std::make_shared<std::atomic<int>>(0);
  for (const WebFile& f : files) {
    http->Get(server::ExactRoutePattern(f.path), [f, running, max_downloads](const httplib::Request&, httplib::Response& res) {
      Isolate(res);
      res.set_header("Cache-Control", "no-cache");
      if (f.file.empty()) {
        res.set_content(f.body, f.content_type);
        return;
      }
      auto file = std::make_shared<OpenFile>();
      file->fd = ::open(f.file.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      if (file->fd < 0 || ::fstat(file->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        server::SendError(res, 404, "not_found", f.path + " cannot be read on the server (see its log)");
        std::fprintf(stderr, "tlr serve: %s: cannot read %s\n", f.path.c_str(), f.file.c_str());
        return;
      }
      if (f.size >= 0 && (st.st_size != f.size ||
                          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec != f.mtime)) {
        server::SendError(res, 503, "file_changed",
                          f.path + " changed since the server started: restart it to serve the new file under a new URL");
        return;
      }
      const size_t size = static_cast<size_t>(st.st_size);
      if (size == 0) {
        res.set_content("", f.content_type);
        return;
      }
      if (running->fetch_add(1) >= max_downloads) {
        running->fetch_sub(1);
        res.set_header("Retry-After", "2");
        server::SendError(res, 503, "busy", "too many downloads at once; try again in a moment");
        return;
      }
      res.set_content_provider(
          size, f.content_type,
          [file](size_t offset, size_t length, httplib::DataSink& sink) {
            char buf[1 << 16];
            const ssize_t n = ::pread(file->fd, buf, std::min(length, sizeof buf), static_cast<off_t>(offset));
            if (n <= 0) return false;  // cut short or unreadable: the reply ends (the client sees it short)
            return sink.write(buf, static_cast<size_t>(n));
          },
          [running](bool) { running->fetch_sub(1); });
    });
  }
}

}  // namespace tlr
