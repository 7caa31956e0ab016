#include "engine/comm/collective_fingerprint.hpp"

#include <array>
#include <sstream>

namespace fsdplab {

std::string describe(const CollectiveFingerprint& c, std::uint64_t seq, const std::vector<int>& members) {
  constexpr std::array<const char*, 6> names = {"all_gather", "reduce_scatter", "all_reduce",
                                                "broadcast",  "barrier",        "split"};
  using Kind = CollectiveKind;
  std::ostringstream s;
  s << names[static_cast<std::size_t>(c.kind)];
  if (c.kind == Kind::reduce_scatter || c.kind == Kind::all_reduce) s << (c.op == ReduceOp::sum ? "(sum)" : "(avg)");
  s << " #" << seq;
  if (c.kind != Kind::barrier && c.kind != Kind::split)
    s << " of " << c.count << " " << dtype_name(c.dtype) << " elements";
  if (c.kind == Kind::broadcast) {
    s << " from rank ";
    if (c.root >= 0 && static_cast<std::size_t>(c.root) < members.size()) {
      s << members[static_cast<std::size_t>(c.root)];
    } else {
      s << "(group rank " << c.root << ")";
    }
  }
  if (c.dry) s << " (dry run)";
  return s.str();
}

std::string group_str(const std::vector<int>& members) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < members.size(); ++i) s << (i ? ", " : "") << members[i];
  s << "]";
  return s.str();
}

std::string mismatch_message(const std::vector<int>& members, std::size_t i, const CollectiveFingerprint& theirs,
                             const CollectiveFingerprint& first, std::uint64_t seq) {
  return "collective mismatch in group " + group_str(members) + ": rank " + std::to_string(members[i]) + " called " +
         describe(theirs, seq, members) + ", rank " + std::to_string(members[0]) + " called " +
         describe(first, seq, members);
}

}  // namespace fsdplab
