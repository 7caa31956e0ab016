// trace_wire.cpp — the frame encoder and the checking decoder of trace_wire.hpp.
//
// Integers are written byte by byte in little-endian order (never memcpy'd structs), so the format is
// the same on every host and a reader never depends on padding or alignment.
#include "engine/trace/trace_wire.hpp"

#include <bit>
#include <type_traits>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

// The u8 that starts every frame's body: the index of the message in WireMessage.
enum class WireKind : std::uint8_t { hello, event, counter, step, bye, failed };
constexpr std::size_t kWireKindCount = std::variant_size_v<WireMessage>;
static_assert(static_cast<std::size_t>(WireKind::failed) + 1 == kWireKindCount);

constexpr std::size_t kLengthBytes = 4;

// The largest body a valid message makes (an event with the longest strings and the most
// dependencies): every valid message fits a frame, so the encoder never has to refuse one for size.
constexpr std::size_t kMaxEventBody = 1 + 4 + 1 + (4 + kWireMaxString) + 1 + 4 + 4 + (4 + kWireMaxString) +
                                      8 + 8 + 8 + 8 + 8 + 4 + kWireMaxDeps * (4 + 8);
static_assert(kMaxEventBody <= kWireMaxFrame);
// And a failure with its race (error, flag, message, rank, two accesses, the flags, block and tags).
constexpr std::size_t kMaxFailedBody = 1 + (4 + kWireMaxString) + 1 + (4 + kWireMaxString) + 4 +
                                       2 * (8 + (4 + kWireMaxString) + 1 + 8 + 8 + 8) + 1 + 1 + 8 + 1 + 1 + 1;
static_assert(kMaxFailedBody <= kWireMaxFrame);

// ---- a frame's bytes, written and read -------------------------------------------------------------

class FrameWriter {
 public:
  explicit FrameWriter(std::string& out) : out_(out) {}

  template <class Int>
  void integer(Int value) {
    using U = std::make_unsigned_t<Int>;
    const U bits = static_cast<U>(value);
    for (std::size_t i = 0; i < sizeof(U); ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }
  void real(double value) { integer(std::bit_cast<std::uint64_t>(value)); }
  void text(std::string_view s) {
    integer(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }

 private:
  std::string& out_;
};

// Reads one frame's body; every read checks that the bytes are there, so a field that claims more
// than the frame holds is an error, never a read past it.
class FrameReader {
 public:
  explicit FrameReader(std::string_view body) : body_(body) {}

  template <class Int>
  Int integer(std::string_view what) {
    using U = std::make_unsigned_t<Int>;
    need(sizeof(U), what);
    U bits = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i)
      bits |= static_cast<U>(static_cast<U>(static_cast<unsigned char>(body_[pos_ + i])) << (8 * i));
    pos_ += sizeof(U);
    return static_cast<Int>(bits);
  }
  double real(std::string_view what) { return std::bit_cast<double>(integer<std::uint64_t>(what)); }
  std::string text(std::string_view what) {
    const auto size = integer<std::uint32_t>(what);
    check(size <= kWireMaxString, what, " of ", size, " bytes; at most ", kWireMaxString);
    need(size, what);
    std::string s(body_.substr(pos_, size));
    pos_ += size;
    return s;
  }
  template <class Enum>
  Enum enumeration(std::size_t count, std::string_view what) {
    const auto value = integer<std::uint8_t>(what);
    check(value < count, what, " ", static_cast<int>(value), "; expected 0..", count - 1);
    return static_cast<Enum>(value);
  }
  void finish(std::string_view what) const {
    const std::size_t extra = body_.size() - pos_;
    check(extra == 0, what, " frame of ", body_.size(), " bytes has ", extra, extra == 1 ? " byte" : " bytes",
          " after its last field");
  }

 private:
  void need(std::size_t bytes, std::string_view what) const {
    check(body_.size() - pos_ >= bytes, what, " needs ", bytes, " bytes; the frame has ",
          body_.size() - pos_, " left");
  }
  std::string_view body_;
  std::size_t pos_ = 0;
};

// ---- what a message must satisfy -------------------------------------------------------------------

// What a message must satisfy beyond its bytes, checked on both sides: before writing (so a frame
// written is a frame read) and after reading.
void check_time(SimTime t, std::string_view what) {
  check(t >= -kWireMaxTime && t <= kWireMaxTime, what, " at ", t, " ns; expected within +-", kWireMaxTime, " ns");
}
void check_span(SimTime begin, SimTime end, std::string_view what) {
  check_time(begin, what);
  check_time(end, what);
  check(begin <= end, what, " ends at ", end, " ns, before it begins at ", begin, " ns");
}
void check_text(std::string_view s, std::string_view what) {
  check(s.size() <= kWireMaxString, what, " of ", s.size(), " bytes; at most ", kWireMaxString);
}

void validate(const WireHello& h) {
  check_text(h.run, "run id");
  check_text(h.backend, "backend");
  check(h.mode.empty() || h.mode == "sync" || h.mode == "async", "hello of mode '", h.mode,
        "'; expected sync, async or none");
  check(h.world >= 1 && h.world <= kWireMaxWorld, "hello of world ", h.world, "; expected 1..", kWireMaxWorld);
  // In 64 bits: hostile values near INT_MAX must not overflow the sum.
  const std::int64_t last = std::int64_t{h.rank} + h.ranks - 1;
  check(h.rank >= 0 && h.ranks >= 1 && last < h.world, "hello of ranks ", h.rank, "..", last,
        "; expected within 0..", h.world - 1);
}

void validate(const TraceEvent& e) {
  check_text(e.name, "event name");
  check_text(e.phase, "event phase");
  check_span(e.begin, e.end, "event '" + e.name + "'");
  check(e.step >= -1 && e.step <= kWireMaxStep, "event '", e.name, "' of step ", e.step, "; expected -1 (none) to ",
        kWireMaxStep);
  check(e.deps.size() <= kWireMaxDeps, "event '", e.name, "' with ", e.deps.size(), " dependencies; at most ",
        kWireMaxDeps);
}

void validate(const CounterSample& c) {
  check_time(c.time, "counter");
  check(c.tag_live >= 0 && c.total_live >= 0, "counter of ", c.tag_live, " bytes ", mem_tag_name(c.tag), " and ",
        c.total_live, " in all; expected >= 0");
}

void validate(const WireStep& s) {
  check(s.step >= 0 && s.step <= kWireMaxStep, "step ", s.step, "; expected 0 to ", kWireMaxStep);
  check_span(s.begin, s.end, "step " + std::to_string(s.step));
}

void validate(const WireBye&) {}

void validate(const Accessor& a, std::string_view what) {
  check_text(a.name, what);
  check_span(a.begin, a.end, std::string(what) + " '" + a.name + "'");
}

void validate(const WireFailed& f) {
  check_text(f.error, "error");
  if (!f.race) return;
  check_text(f.race->message, "race message");
  check(f.race->rank >= 0 && f.race->rank < kWireMaxWorld, "a race on rank ", f.race->rank, "; expected 0..",
        kWireMaxWorld - 1);
  validate(f.race->earlier, "race's earlier access");
  validate(f.race->later, "race's later access");
}

// ---- writing a message's body ----------------------------------------------------------------------

void write_body(FrameWriter& w, const WireHello& h) {
  w.integer(kWireMagic);
  w.integer(kWireVersion);
  w.text(h.run);
  w.integer(static_cast<std::int32_t>(h.rank));
  w.integer(static_cast<std::int32_t>(h.ranks));
  w.integer(static_cast<std::int32_t>(h.world));
  w.text(h.backend);
  w.text(h.mode);
}

void write_body(FrameWriter& w, const TraceEvent& e) {
  w.integer(static_cast<std::int32_t>(e.rank));
  w.integer(static_cast<std::uint8_t>(e.lane));
  w.text(e.name);
  w.integer(static_cast<std::uint8_t>(e.category));
  w.integer(static_cast<std::int32_t>(e.step));
  w.integer(static_cast<std::int32_t>(e.unit));
  w.text(e.phase);
  w.integer(e.begin);
  w.integer(e.end);
  w.integer(e.bytes);
  w.real(e.flops);
  w.integer(e.op);
  w.integer(static_cast<std::uint32_t>(e.deps.size()));
  for (const OpRef& d : e.deps) {
    w.integer(static_cast<std::int32_t>(d.rank));
    w.integer(d.op);
    w.integer(static_cast<std::uint8_t>(d.reason));
  }
  w.integer(static_cast<std::uint8_t>(e.link));
}

void write_body(FrameWriter& w, const CounterSample& c) {
  w.integer(static_cast<std::int32_t>(c.rank));
  w.integer(c.time);
  w.integer(static_cast<std::uint8_t>(c.tag));
  w.integer(c.tag_live);
  w.integer(c.total_live);
}

void write_body(FrameWriter& w, const WireStep& s) {
  w.integer(static_cast<std::int32_t>(s.rank));
  w.integer(static_cast<std::int32_t>(s.step));
  w.integer(s.begin);
  w.integer(s.end);
  w.real(s.loss);
  w.real(s.grad_norm);
}

void write_body(FrameWriter&, const WireBye&) {}

void write_body(FrameWriter& w, const Accessor& a) {
  w.integer(a.op);
  w.text(a.name);
  w.integer(static_cast<std::uint8_t>(a.lane));
  w.integer(a.seq);
  w.integer(a.begin);
  w.integer(a.end);
}

void write_body(FrameWriter& w, const WireFailed& f) {
  w.text(f.error);
  w.integer(static_cast<std::uint8_t>(f.race.has_value()));
  if (!f.race) return;
  const RaceReport& race = *f.race;
  w.text(race.message);
  w.integer(static_cast<std::int32_t>(race.rank));
  write_body(w, race.earlier);
  write_body(w, race.later);
  w.integer(static_cast<std::uint8_t>(race.earlier_wrote));
  w.integer(static_cast<std::uint8_t>(race.later_writes));
  w.integer(race.block);
  w.integer(static_cast<std::uint8_t>(race.earlier_tag));
  w.integer(static_cast<std::uint8_t>(race.later_tag));
  w.integer(static_cast<std::uint8_t>(race.reused));
}

// ---- reading a message's body ----------------------------------------------------------------------

WireHello read_hello(FrameReader& r) {
  const auto magic = r.integer<std::uint32_t>("hello magic");
  check(magic == kWireMagic, "a hello with magic 0x", std::hex, magic, "; expected 0x", kWireMagic, std::dec,
        " (this is not an fsdplab trace stream)");
  const auto version = r.integer<std::uint16_t>("hello version");
  check(version == kWireVersion, "wire format version ", version, "; this build reads version ", kWireVersion);
  WireHello h;
  h.run = r.text("run id");
  h.rank = r.integer<std::int32_t>("hello rank");
  h.ranks = r.integer<std::int32_t>("hello rank count");
  h.world = r.integer<std::int32_t>("hello world");
  h.backend = r.text("backend");
  h.mode = r.text("mode");
  return h;
}

TraceEvent read_event(FrameReader& r) {
  TraceEvent e;
  e.rank = r.integer<std::int32_t>("event rank");
  e.lane = r.enumeration<Lane>(kLaneCount, "lane");
  e.name = r.text("event name");
  e.category = r.enumeration<OpCategory>(kOpCategoryCount, "category");
  e.step = r.integer<std::int32_t>("event step");
  e.unit = r.integer<std::int32_t>("event unit");
  e.phase = r.text("event phase");
  e.begin = r.integer<SimTime>("event begin");
  e.end = r.integer<SimTime>("event end");
  e.bytes = r.integer<std::int64_t>("event bytes");
  e.flops = r.real("event flops");
  e.op = r.integer<OpId>("event op");
  const auto deps = r.integer<std::uint32_t>("dependency count");
  // Checked before the vector is sized: a hostile count must not allocate.
  check(deps <= kWireMaxDeps, "event '", e.name, "' with ", deps, " dependencies; at most ", kWireMaxDeps);
  e.deps.resize(deps);
  for (OpRef& d : e.deps) {
    d.rank = r.integer<std::int32_t>("dependency rank");
    d.op = r.integer<OpId>("dependency op");
    d.reason = r.enumeration<WaitReason>(kWaitReasonCount, "dependency reason");
  }
  e.link = r.enumeration<RankLink>(kRankLinkCount, "link");
  return e;
}

CounterSample read_counter(FrameReader& r) {
  CounterSample c;
  c.rank = r.integer<std::int32_t>("counter rank");
  c.time = r.integer<SimTime>("counter time");
  c.tag = r.enumeration<MemTag>(kMemTagCount, "memory tag");
  c.tag_live = r.integer<std::int64_t>("counter tag bytes");
  c.total_live = r.integer<std::int64_t>("counter total bytes");
  return c;
}

WireStep read_step(FrameReader& r) {
  WireStep s;
  s.rank = r.integer<std::int32_t>("step rank");
  s.step = r.integer<std::int32_t>("step number");
  s.begin = r.integer<SimTime>("step begin");
  s.end = r.integer<SimTime>("step end");
  s.loss = r.real("step loss");
  s.grad_norm = r.real("step gradient norm");
  return s;
}

bool read_flag(FrameReader& r, std::string_view what) {
  const auto value = r.integer<std::uint8_t>(what);
  check(value <= 1, what, " ", static_cast<int>(value), "; expected 0 or 1");
  return value == 1;
}

Accessor read_accessor(FrameReader& r, std::string_view what) {
  Accessor a;
  a.op = r.integer<OpId>(what);
  a.name = r.text(what);
  a.lane = r.enumeration<Lane>(kLaneCount, what);
  a.seq = r.integer<std::uint64_t>(what);
  a.begin = r.integer<SimTime>(what);
  a.end = r.integer<SimTime>(what);
  return a;
}

WireFailed read_failed(FrameReader& r) {
  WireFailed f;
  f.error = r.text("error");
  if (!read_flag(r, "failure's race flag")) return f;
  RaceReport& race = f.race.emplace();
  race.message = r.text("race message");
  race.rank = r.integer<std::int32_t>("race rank");
  race.earlier = read_accessor(r, "race's earlier access");
  race.later = read_accessor(r, "race's later access");
  race.earlier_wrote = read_flag(r, "race's earlier write flag");
  race.later_writes = read_flag(r, "race's later write flag");
  race.block = r.integer<BlockId>("race block");
  race.earlier_tag = r.enumeration<MemTag>(kMemTagCount, "race's earlier tag");
  race.later_tag = r.enumeration<MemTag>(kMemTagCount, "race's later tag");
  race.reused = read_flag(r, "race's reuse flag");
  return f;
}

WireMessage read_body(std::string_view body) {
  FrameReader r(body);
  const auto kind = r.enumeration<WireKind>(kWireKindCount, "message kind");
  WireMessage message;
  switch (kind) {
    case WireKind::hello: message = read_hello(r); break;
    case WireKind::event: message = read_event(r); break;
    case WireKind::counter: message = read_counter(r); break;
    case WireKind::step: message = read_step(r); break;
    case WireKind::bye: message = WireBye{}; break;
    case WireKind::failed:
      message = read_failed(r);
      break;
  }
  static constexpr std::string_view kKindNames[] = {"hello", "event", "counter", "step", "bye", "failure"};
  r.finish(kKindNames[static_cast<std::size_t>(kind)]);
  std::visit([](const auto& m) { validate(m); }, message);
  return message;
}

// ---- a stream's opening, and the bytes an error shows ----------------------------------------------

// `bytes` in hex: 47 45 54 20.
std::string hex_bytes(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    hex += (hex.empty() ? "" : " ") + std::string{kHex[byte >> 4], kHex[byte & 0xF]};
  }
  return hex;
}

// `bytes` in hex, then as text where printable: 47 45 54 20 ("GET ").
std::string bytes_text(std::string_view bytes) {
  std::string text;
  for (const char c : bytes) text += c >= 0x20 && c < 0x7F ? c : '.';
  return hex_bytes(bytes) + " (\"" + text + "\")";
}

// How a stream opens: a hello frame's length (any; checked with its frame), its message kind and the magic.
constexpr std::size_t kOpeningBytes = kLengthBytes + 1 + sizeof(kWireMagic);

void check_opening(std::string_view opening) {
  std::string kind, magic;
  FrameWriter(kind).integer(static_cast<std::uint8_t>(WireKind::hello));
  FrameWriter(magic).integer(kWireMagic);
  check(opening.substr(kLengthBytes) == kind + magic, "not an fsdplab trace stream: it opens with ",
        bytes_text(opening), "; an fsdplab trace stream opens with a hello frame: a 4-byte length, the hello's ",
        "message kind ", hex_bytes(kind), ", then the magic ", bytes_text(magic));
}

}  // namespace

// ---- append_frame and WireDecoder ------------------------------------------------------------------

void append_frame(std::string& out, const WireMessage& message) {
  try {
    std::visit([](const auto& m) { validate(m); }, message);
  } catch (const Error& e) {
    fail("trace wire: cannot send ", e.what());
  }
  const std::size_t start = out.size();
  FrameWriter w(out);
  w.integer(std::uint32_t{0});  // the length, filled in below
  w.integer(static_cast<std::uint8_t>(message.index()));
  std::visit([&](const auto& m) { write_body(w, m); }, message);
  const std::size_t body = out.size() - start - kLengthBytes;
  for (std::size_t i = 0; i < kLengthBytes; ++i) out[start + i] = static_cast<char>((body >> (8 * i)) & 0xFF);
}

void WireDecoder::feed(std::string_view bytes) {
  // Drop what was decoded once it is most of the buffer, so a long stream keeps only its tail.
  if (read_ > 0 && read_ >= buffer_.size() / 2) {
    buffer_.erase(0, read_);
    read_ = 0;
  }
  buffer_.append(bytes);
}

std::optional<WireMessage> WireDecoder::next() {
  const std::size_t available = buffer_.size() - read_;
  if (!opening_checked_) {
    // Waiting for all of it never stalls a stream of fsdplab's: a hello's frame is longer than its opening.
    if (available < kOpeningBytes) return std::nullopt;
    check_opening(std::string_view(buffer_).substr(read_, kOpeningBytes));
    opening_checked_ = true;
  }
  if (available < kLengthBytes) return std::nullopt;
  std::uint32_t length = 0;
  for (std::size_t i = 0; i < kLengthBytes; ++i)
    length |= static_cast<std::uint32_t>(static_cast<unsigned char>(buffer_[read_ + i])) << (8 * i);
  // Checked before waiting for the body, so a hostile length never makes anyone buffer it.
  check(length <= kWireMaxFrame, "frame of ", length, " bytes; at most ", kWireMaxFrame);
  check(length >= 1, "frame of 0 bytes; expected at least its message kind");
  if (available - kLengthBytes < length) return std::nullopt;
  const std::string_view body(buffer_.data() + read_ + kLengthBytes, length);
  WireMessage message = read_body(body);
  read_ += kLengthBytes + length;
  return message;
}

}  // namespace fsdplab
