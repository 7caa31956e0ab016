// trace_wire.hpp — trace events as bytes between processes: ranks stream them to a remote dashboard
// (trace_stream.hpp), and MPI ranks gather them to one process.
//
// A stream is a sequence of frames, each a little-endian u32 length and that many bytes of body: a
// u8 message kind, then the message's fields, little-endian, strings as a u32 length and bytes. A
// stream starts with a hello, which carries the format's magic and version, so a stream from another
// program or another version is refused at its first frame. The bytes may come from anyone who can
// reach a socket, so the decoder trusts nothing: the frame length, every string length and the count
// of an event's dependencies are bounded, every enum is range-checked, every time span has
// begin <= end, a frame must be consumed exactly. What a decoder cannot know (a rank outside the
// world the hello announced, events before a hello) its receiver checks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "engine/runtime/race_detector.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab {

// A rank's run, as one stream announces it first.
struct WireHello {
  std::string run;  // an id shared by the ranks of one run
  int rank = 0;     // the first rank this stream carries
  int world = 1;
  std::string backend;  // the device ("sim", "cuda")
  int ranks = 1;        // how many ranks this stream carries: rank .. rank + ranks - 1 (a process's ranks)
  std::string mode;     // "sync" or "async" when every step of the run overlaps that way, else empty
};

// A finished training step (StepReport), as rank `rank` saw it.
struct WireStep {
  int rank = 0;
  int step = 0;
  SimTime begin = 0;
  SimTime end = 0;
  double loss = 0;
  // The whole model's gradient norm before clipping, where the run clips (--clip-grad-norm); NaN otherwise.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

// The stream ends here, on purpose: the run finished.
struct WireBye {};

// The stream ends here because the run failed: what it failed with (at most kWireMaxString bytes), which the
// dashboard shows as it shows a failed run of its own; and where the sim device's race detector stopped it, the
// race, which the dashboard marks on the timeline as it marks its own runs' (its texts cut to kWireMaxString bytes).
struct WireFailed {
  std::string error;
  std::optional<RaceReport> race;
};

using WireMessage = std::variant<WireHello, TraceEvent, CounterSample, WireStep, WireBye, WireFailed>;

constexpr std::uint32_t kWireMagic = 0x57444C46;  // "FLDW" in little-endian bytes: fsdplab wire
constexpr std::uint16_t kWireVersion = 6;         // 6: a step carries its gradient norm
constexpr std::size_t kWireMaxFrame = std::size_t{1} << 20;  // body bytes of one frame
constexpr std::size_t kWireMaxString = 4096;                 // bytes of one name, phase, run id, backend or error
constexpr std::size_t kWireMaxDeps = 4096;                   // dependencies of one event
// Ranks a hello may announce: `fsdplab run --world` takes no more, and a receiver keeps memory per rank.
constexpr int kWireMaxWorld = 1024;
// Step numbers (of events and steps): `fsdplab run --steps` takes at most 2^24 a run, and this leaves
// room for many resumed runs; a receiver's arithmetic on steps (the step-time panel's axis) stays far
// from overflow.
constexpr int kWireMaxStep = 1 << 30;
// Times, in ns, lie within +-kWireMaxTime (73 years): an end minus a begin never overflows.
constexpr SimTime kWireMaxTime = SimTime{1} << 61;

// Appends `message` to `out` as one frame. An Error if a field is out of the bounds the decoder
// enforces (a name over kWireMaxString bytes, an event ending before it begins, ...), so a frame this
// writes is always one a decoder reads back; `out` is then unchanged.
void append_frame(std::string& out, const WireMessage& message);

// Reads frames from bytes that arrive in pieces of any size (a socket's reads).
class WireDecoder {
 public:
  // What the bytes start with. A stream opens with a hello, and its opening (a frame length, the hello's
  // message kind and the magic: 9 bytes) is checked first, before any length is trusted: bytes of another
  // program (an HTTP request, a port scanner's probe) are refused as not an fsdplab trace stream, rather than
  // read as the length of a frame too long to take. The frames an MPI rank gathers (rank_launch.cpp) have no
  // hello.
  enum class Opening { hello, any_frame };
  explicit WireDecoder(Opening opening = Opening::hello) : opening_checked_(opening == Opening::any_frame) {}

  void feed(std::string_view bytes);
  // The next whole frame's message; nullopt while its bytes have not all arrived. An Error naming
  // what was expected and what came on a malformed frame ("lane 9; expected 0..4"; the caller adds
  // where the bytes came from); the stream is then lost (its framing cannot be trusted again).
  std::optional<WireMessage> next();
  // Bytes fed and not yet decoded: at most one partial frame plus what the last feed brought.
  std::size_t buffered() const { return buffer_.size() - read_; }

 private:
  std::string buffer_;
  std::size_t read_ = 0;  // bytes of buffer_ already decoded
  bool opening_checked_;
};

}  // namespace fsdplab
