#include "engine/fsdp/fsdp_observer.hpp"

#include <array>

namespace fsdplab {

std::string_view fsdp_event_name(FsdpEventKind kind) {
  constexpr std::array<std::string_view, kFsdpEventKindCount> names = {
      "pre-forward",       "post-forward",    "pre-backward",  "post-backward",
      "collective issued", "collective done", "optimizer step"};
  return names[static_cast<std::size_t>(kind)];
}

}  // namespace fsdplab
