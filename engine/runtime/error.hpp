// error.hpp — the one exception type the engine throws for bad input and misuse.
//
// Every message says what was expected and what came instead. `fail` builds the message from any
// streamable pieces, so call sites read like the sentence they produce:
//   fail("matmul: inner dimensions differ: A is ", a.shape_str(), ", B is ", b.shape_str());
#pragma once
#include <exception>
#include <optional>
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

// `e` itself where it is an E, else the E it carries as the failure it reports (std::throw_with_nested: a world's
// "rank 1 failed: ..." carries that rank's own exception), as a copy; nullopt where there is none. A catcher tells a
// TODO or a race from other errors by its type, whatever the message says, and reads what the error carries.
template <class E>
std::optional<E> cause_of_type(const std::exception& e) {
  if (const auto* found = dynamic_cast<const E*>(&e)) return *found;
  const auto* carrier = dynamic_cast<const std::nested_exception*>(&e);
  if (!carrier || !carrier->nested_ptr()) return std::nullopt;
  try {
    std::rethrow_exception(carrier->nested_ptr());
  } catch (const std::exception& cause) {
    return cause_of_type<E>(cause);
  } catch (...) {
  }
  return std::nullopt;
}

// Whether `e` is an E, or carries one (cause_of_type).
template <class E>
bool caused_by(const std::exception& e) {
  return cause_of_type<E>(e).has_value();
}

}  // namespace fsdplab
