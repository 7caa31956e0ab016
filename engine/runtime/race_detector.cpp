#include "engine/runtime/race_detector.hpp"

#include <algorithm>
#include <sstream>

namespace fsdplab {
namespace {

std::string describe(const Accessor& a) {
  std::ostringstream s;
  if (a.op == 0) {
    s << "the host";
  } else {
    s << "op #" << a.op << " '" << a.name << "' on stream " << lane_name(a.lane);
  }
  s << " [" << ns_to_us(a.begin) << " us, " << ns_to_us(a.end) << " us]";
  return s.str();
}

bool overlaps(std::int64_t a_off, std::int64_t a_len, std::int64_t b_off, std::int64_t b_len) {
  return a_off < b_off + b_len && b_off < a_off + a_len;
}

}  // namespace

void RaceDetector::check_access(int rank, const Block& block, const Access& access, bool write,
                                const Accessor& who, const VectorClock& clock) {
  auto it = history_.find(block.id);
  if (it == history_.end()) return;
  for (const Entry& e : it->second) {
    if (!e.write && !write) continue;  // two reads never race
    if (!overlaps(e.offset, e.bytes, access.offset, access.bytes)) continue;
    if (clock[lane_index(e.who.lane)] >= e.who.seq) continue;  // ordered: e happens-before this access
    if (e.who.lane == who.lane && e.who.op == who.op) continue;  // an op reading what it writes
    std::ostringstream m;
    m << "stream race on rank " << rank << ", buffer #" << block.id << " (tag " << mem_tag_name(block.tag)
      << ", bytes [" << access.offset << ", " << access.offset + access.bytes << ")): " << describe(who)
      << (write ? " writes" : " reads") << " it, but " << describe(e.who) << (e.write ? " wrote" : " read")
      << " it";
    const bool reused = e.generation != block.generation;
    if (reused) {
      m << " in an earlier allocation (tag " << mem_tag_name(e.tag)
        << ") and the block was freed and reused in between";
    }
    m << ", and no event orders the two (a missing stream wait";
    m << (reused ? " before the free, or before this access" : ", or an event recorded on another stream");
    m << "?)";
    RaceReport report{.message = m.str(),
                      .rank = rank,
                      .earlier = e.who,
                      .later = who,
                      .earlier_wrote = e.write,
                      .later_writes = write,
                      .block = block.id,
                      .earlier_tag = e.tag,
                      .later_tag = block.tag,
                      .reused = reused};
    if (policy_ == Policy::throw_error) throw RaceError(std::move(report));
    races_.push_back(std::move(report));
    return;
  }
}

void RaceDetector::commit(const Block& block, const Access& access, bool write, const Accessor& who) {
  history_[block.id].push_back({who, access.offset, access.bytes, write, block.tag, block.generation});
}

void RaceDetector::prune(BlockId block, const std::array<VectorClock, kLaneCount>& lane_clocks) {
  auto it = history_.find(block);
  if (it == history_.end()) return;
  std::erase_if(it->second, [&](const Entry& e) {
    return std::all_of(lane_clocks.begin(), lane_clocks.end(),
                       [&](const VectorClock& c) { return c[lane_index(e.who.lane)] >= e.who.seq; });
  });
}

void RaceDetector::hand_over(BlockId block, const VectorClock& freed) {
  auto it = history_.find(block);
  if (it == history_.end()) return;
  std::erase_if(it->second, [&](const Entry& e) { return freed[lane_index(e.who.lane)] >= e.who.seq; });
}

}  // namespace fsdplab
