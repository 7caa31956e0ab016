// error.hpp — the one exception type the engine throws for bad input and misuse.
//
// Every message says what was expected and what came instead. `fail` builds the message from any
// streamable pieces, so call sites read like the sentence they produce:
//   fail("matmul: inner dimensions differ: A is ", a.shape_str(), ", B is ", b.shape_str());
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace fsdplab {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// fail, throwing E (an Error) for a catcher that must tell this kind of failure from the others.
template <class E, class... Parts>
[[noreturn]] void fail_as(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw E(message.str());
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  fail_as<Error>(parts...);
}

template <class... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace fsdplab
