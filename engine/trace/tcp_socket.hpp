// tcp_socket.hpp — the little of POSIX TCP that the remote dashboard needs: "HOST:PORT" parsed and
// resolved, a connect that gives up after a timeout, a listening socket, and an owned descriptor.
//
// Sockets are made non-blocking: the trace stream's sender and the dashboard's listener each run one
// thread that waits in poll() for whichever of its sockets is ready, so no peer can stall them.
#pragma once
#include <chrono>
#include <string>
#include <string_view>

namespace fsdplab {

struct SocketAddress {
  std::string host;  // a name or a numeric IPv4/IPv6 address (without brackets)
  int port = 0;

  std::string text() const;  // "127.0.0.1:7077", "[::1]:7077"
};

// Parses "HOST:PORT" ("[IPv6]:PORT" for IPv6 literals). With a non-empty `default_host`, "PORT" alone
// means default_host:PORT. Port 0 ("any free port") only when `any_port` is true. An Error naming
// `flag` and the expected form otherwise.
SocketAddress parse_socket_address(std::string_view text, std::string_view flag, std::string_view default_host = {},
                                   bool any_port = false);

// An owned file descriptor (a socket, or the listener's wake-up pipe), closed on destruction.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd() { close(); }
  OwnedFd(OwnedFd&& other) noexcept : fd_(other.release()) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  int release();
  void close();

 private:
  int fd_ = -1;
};

// A non-blocking socket connected to `address`, trying each address the host resolves to, waiting at
// most `timeout` for each. An Error with the reason in words ("connection refused", "timed out after
// 5 s", "no such host") otherwise; the caller says what it was connecting to.
OwnedFd connect_tcp(const SocketAddress& address, std::chrono::milliseconds timeout);

struct ListeningSocket {
  OwnedFd socket;  // non-blocking, listening
  int port = 0;   // the port bound (the one the system chose for port 0)
  bool loopback = false;  // bound to a loopback address only
};
// Binds and listens on `address`; an Error with the reason in words ("address already in use")
// otherwise, which the caller puts in context.
ListeningSocket listen_tcp(const SocketAddress& address);

// The peer of a connected socket as "ADDRESS:PORT", or "unknown peer".
std::string peer_name(int fd);

// strerror's words with a lower-case first letter, to sit inside a sentence.
std::string errno_words(int error);

}  // namespace fsdplab
