// error.hpp — the one exception type the engine throws for bad input and misuse.
//
// Every message says what was expected and what came instead. `fail` builds the message from any
// streamable pieces, so call sites read like the sentence they produce:
//   fail("matmul: inner dimensions differ: A is ", a.shape_str(), ", B is ", b.shape_str());
#pragma once
#include <exception>
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

// Whether `e` is an E, or carries one as the failure it reports (std::throw_with_nested: a world's "rank 1
// failed: ..." carries that rank's own exception, so a catcher tells a TODO or a race from other errors by its
// type, whatever the message says).
template <class E>
bool caused_by(const std::exception& e) {
  if (dynamic_cast<const E*>(&e)) return true;
  const auto* carrier = dynamic_cast<const std::nested_exception*>(&e);
  if (!carrier || !carrier->nested_ptr()) return false;
  try {
    std::rethrow_exception(carrier->nested_ptr());
  } catch (const std::exception& cause) {
    return caused_by<E>(cause);
  } catch (...) {
  }
  return false;
}

}  // namespace fsdplab
