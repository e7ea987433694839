// infer serve's HTTP/1.1 server: POSIX sockets and epoll, no dependency.
//
// One I/O thread accepts connections and reads requests (non-blocking
// sockets, level-triggered epoll). A connection that is still sending its
// request holds no worker: deadlines cover the whole header and the whole
// body, not one byte; idle keep-alive connections close after a few seconds;
// the number of open connections and the header bytes/lines are capped.
// Bodies come with Content-Length or chunked transfer encoding; the body
// limit applies to the decoded body of both, while a chunked body is still
// arriving. Complete requests go to a pool of workers through a bounded
// queue (full: 503, answered by the I/O thread); routes marked `inline`
// (cheap ones: /health, /metrics) are answered by the I/O thread itself, so
// they answer while every worker is busy. Pipelined requests on one
// connection are answered one after the other, in order. A worker writes its
// response (whole, or streamed with chunked encoding) under a write
// deadline: no progress for write_timeout seconds and the connection is
// dropped.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace http {

struct Request {
  std::string method;
  std::string target;  // as sent (path and query)
  std::string path;    // without the query
  std::string version;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_addr;
  int remote_port = 0;
  std::string match;  // prefix routes: the path after the prefix

  // The first header of that name (case-insensitive), or "".
  std::string header(const std::string& name) const;
};

class Connection;

class Response {
 public:
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  void set_content(std::string b, const std::string& type) {
    body = std::move(b);
    content_type = type;
  }
  void set_header(const std::string& name, const std::string& value) { headers.emplace_back(name, value); }

  // Streaming (worker routes only): sends the status line and headers with
  // chunked transfer encoding; then write() sends one chunk each. Both
  // return false when the client can no longer be written to (gone, or no
  // progress for the write timeout). The server ends the stream when the
  // handler returns.
  bool start_stream(const std::string& type);
  bool write(const char* data, size_t n);
  bool write(const std::string& s) { return write(s.data(), s.size()); }
  bool streaming() const { return streaming_; }
  // Whether the client closed its end (or the connection failed).
  bool client_gone() const;

 private:
  friend class Server;
  Connection* conn_ = nullptr;
  bool streaming_ = false;
  bool failed_ = false;
};

using Handler = std::function<void(const Request&, Response&)>;

struct Options {
  int workers = 64;                // threads running requests
  size_t queue = 256;              // complete requests waiting for a worker (more: 503)
  size_t max_open = 1024;          // open connections (more: closed at once)
  size_t max_body = 8u << 20;      // decoded body bytes (more: 413)
  size_t max_header_bytes = 32768; // request line and headers (more: 431)
  size_t max_header_lines = 100;
  double header_timeout = 10;      // seconds from a request's first byte to the end of its header
  double body_timeout = 30;        // seconds from the end of the header to the end of the body
  double idle_timeout = 5;         // keep-alive: seconds without a new request
  double write_timeout = 30;       // seconds without write progress
};

class Server {
 public:
  // error_body(status, message, code): the JSON body of an error the server
  // itself answers (400, 404, 405, 411, 413, 431, 501, 503).
  using ErrorBody = std::function<std::string(int status, const std::string& message, const std::string& code)>;
  // Called after each response with its status (logging, metrics).
  using Logger = std::function<void(const Request&, int status)>;

  Server(Options o, ErrorBody e, Logger l);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Exact paths; a path ending in '/' with prefix=true matches below it
  // (Request::match holds the rest). inline: run on the I/O thread (must be
  // quick and never block).
  void route(const std::string& method, const std::string& path, Handler h, bool inline_ = false, bool prefix = false);

  // Binds host:port (0: any free port); returns the port, or -1 with the
  // reason (e.g. "Address already in use") in *why when why is not null.
  int bind(const std::string& host, int port, std::string* why = nullptr);
  // Starts the I/O thread and the workers.
  void start();
  // Closes the listener and every connection, waits for the workers.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A JSON string literal of `s` (invalid UTF-8 replaced by U+FFFD), without
// building a JSON value: for responses written piece by piece.
void append_json_string(std::string& out, const char* s, size_t n);

}  // namespace http
