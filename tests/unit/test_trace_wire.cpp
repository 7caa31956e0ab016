// The trace wire format: every message survives the round trip field for field, in pieces of any size;
// a partial frame waits for more; a malformed one is an Error naming what was expected; random and
// mutated bytes never crash the decoder (the sanitizer presets run this file too).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "engine/trace/trace_wire.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

WireHello sample_hello() { return WireHello{"run-42", 2, 4, "sim", 2, "async"}; }

TraceEvent sample_event() {
  TraceEvent e;
  e.rank = 3;
  e.lane = Lane::reduce_scatter;
  e.name = "reduce_scatter unit 7";
  e.category = OpCategory::all_reduce;
  e.step = 12;
  e.unit = 7;
  e.phase = "backward";
  e.begin = 1'234'567'890'123;
  e.end = 1'234'567'990'123;
  e.bytes = (std::int64_t{1} << 40) + 5;
  e.flops = 3.25e12;
  e.op = 0xFEDCBA9876543210ULL;
  e.deps = {OpRef{0, 17}, OpRef{3, std::numeric_limits<OpId>::max(), WaitReason::freed_block}};
  e.link = RankLink::between_nodes;
  return e;
}

CounterSample sample_counter() { return CounterSample{1, 987'654'321, MemTag::optim_state, 1 << 30, 3LL << 31}; }

WireStep sample_step() { return WireStep{0, 9, 100, 2'000'100, 5.587319, 1.566864}; }

// A failure with the race that stopped it: every field away from its default.
WireFailed sample_race_failure() {
  RaceReport race;
  race.message = "stream race on rank 3, buffer #58 (tag param_full, bytes [0, 64)): ...";
  race.rank = 3;
  race.earlier = Accessor{41, "embedding", Lane::compute, 7, 41'000, 43'000};
  race.later = Accessor{42, "all_gather (root).flat_param_full", Lane::all_gather, 9, 44'000, 68'152};
  race.earlier_wrote = false;
  race.later_writes = true;
  race.block = 58;
  race.earlier_tag = MemTag::comm_buffer;
  race.later_tag = MemTag::param_full;
  race.reused = true;
  return WireFailed{"rank 3 failed: " + race.message, race};
}

std::vector<WireMessage> every_kind() {
  return {sample_hello(),       sample_event(), sample_counter(),
          sample_step(),        WireBye{},      WireFailed{"rank 1 failed: loss is NaN at step 2"},
          sample_race_failure()};
}

void expect_same(const Accessor& got, const Accessor& want) {
  EXPECT_EQ(got.op, want.op);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.lane, want.lane);
  EXPECT_EQ(got.seq, want.seq);
  EXPECT_EQ(got.begin, want.begin);
  EXPECT_EQ(got.end, want.end);
}

void expect_same(const WireMessage& got, const WireMessage& want) {
  ASSERT_EQ(got.index(), want.index());
  if (const auto* h = std::get_if<WireHello>(&want)) {
    const auto& g = std::get<WireHello>(got);
    EXPECT_EQ(g.run, h->run);
    EXPECT_EQ(g.rank, h->rank);
    EXPECT_EQ(g.ranks, h->ranks);
    EXPECT_EQ(g.world, h->world);
    EXPECT_EQ(g.backend, h->backend);
    EXPECT_EQ(g.mode, h->mode);
  } else if (const auto* e = std::get_if<TraceEvent>(&want)) {
    const auto& g = std::get<TraceEvent>(got);
    EXPECT_EQ(g.rank, e->rank);
    EXPECT_EQ(g.lane, e->lane);
    EXPECT_EQ(g.name, e->name);
    EXPECT_EQ(g.category, e->category);
    EXPECT_EQ(g.step, e->step);
    EXPECT_EQ(g.unit, e->unit);
    EXPECT_EQ(g.phase, e->phase);
    EXPECT_EQ(g.begin, e->begin);
    EXPECT_EQ(g.end, e->end);
    EXPECT_EQ(g.bytes, e->bytes);
    EXPECT_EQ(g.flops, e->flops);
    EXPECT_EQ(g.op, e->op);
    EXPECT_EQ(g.deps, e->deps);
    EXPECT_EQ(g.link, e->link);
  } else if (const auto* c = std::get_if<CounterSample>(&want)) {
    const auto& g = std::get<CounterSample>(got);
    EXPECT_EQ(g.rank, c->rank);
    EXPECT_EQ(g.time, c->time);
    EXPECT_EQ(g.tag, c->tag);
    EXPECT_EQ(g.tag_live, c->tag_live);
    EXPECT_EQ(g.total_live, c->total_live);
  } else if (const auto* s = std::get_if<WireStep>(&want)) {
    const auto& g = std::get<WireStep>(got);
    EXPECT_EQ(g.rank, s->rank);
    EXPECT_EQ(g.step, s->step);
    EXPECT_EQ(g.begin, s->begin);
    EXPECT_EQ(g.end, s->end);
    EXPECT_EQ(g.loss, s->loss);
    EXPECT_EQ(g.grad_norm, s->grad_norm);
  } else if (const auto* f = std::get_if<WireFailed>(&want)) {
    const auto& g = std::get<WireFailed>(got);
    EXPECT_EQ(g.error, f->error);
    ASSERT_EQ(g.race.has_value(), f->race.has_value());
    if (!f->race) return;
    EXPECT_EQ(g.race->message, f->race->message);
    EXPECT_EQ(g.race->rank, f->race->rank);
    expect_same(g.race->earlier, f->race->earlier);
    expect_same(g.race->later, f->race->later);
    EXPECT_EQ(g.race->earlier_wrote, f->race->earlier_wrote);
    EXPECT_EQ(g.race->later_writes, f->race->later_writes);
    EXPECT_EQ(g.race->block, f->race->block);
    EXPECT_EQ(g.race->earlier_tag, f->race->earlier_tag);
    EXPECT_EQ(g.race->later_tag, f->race->later_tag);
    EXPECT_EQ(g.race->reused, f->race->reused);
  }
}

std::string encode(const std::vector<WireMessage>& messages) {
  std::string bytes;
  for (const WireMessage& m : messages) append_frame(bytes, m);
  return bytes;
}

// Decodes everything `decoder` holds; the messages, in order.
std::vector<WireMessage> drain(WireDecoder& decoder) {
  std::vector<WireMessage> out;
  while (auto m = decoder.next()) out.push_back(std::move(*m));
  return out;
}

// The message a decoder throws on `bytes`, fed whole. Frames alone by default: most tests break one frame.
std::string decode_error(std::string_view bytes, WireDecoder::Opening opening = WireDecoder::Opening::any_frame) {
  return testing::error_of([&] {
    WireDecoder decoder(opening);
    decoder.feed(bytes);
    drain(decoder);
  });
}

void put_u32(std::string& bytes, std::size_t at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

TEST(TraceWire, EveryKindRoundTrips) {
  const std::vector<WireMessage> sent = every_kind();
  WireDecoder decoder;
  decoder.feed(encode(sent));
  const std::vector<WireMessage> got = drain(decoder);
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) expect_same(got[i], sent[i]);
  EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(TraceWire, ExtremeValuesRoundTrip) {
  TraceEvent e = sample_event();
  e.rank = std::numeric_limits<int>::min();  // a decoder does not judge ranks; its receiver does
  e.begin = -kWireMaxTime;
  e.end = kWireMaxTime;
  e.step = kWireMaxStep;
  e.bytes = -1;
  e.flops = -0.0;
  e.name = std::string(kWireMaxString, 'x');
  e.phase.clear();
  e.deps.assign(kWireMaxDeps, OpRef{-1, 0});
  WireStep s = sample_step();
  s.loss = std::numeric_limits<double>::quiet_NaN();
  s.grad_norm = WireStep{}.grad_norm;  // a run that does not clip: NaN
  s.step = kWireMaxStep;
  WireDecoder decoder(WireDecoder::Opening::any_frame);
  decoder.feed(encode({e, s}));
  const auto got = drain(decoder);
  ASSERT_EQ(got.size(), 2u);
  expect_same(got[0], e);
  EXPECT_TRUE(std::signbit(std::get<TraceEvent>(got[0]).flops));
  EXPECT_TRUE(std::isnan(std::get<WireStep>(got[1]).loss));
  EXPECT_TRUE(std::isnan(std::get<WireStep>(got[1]).grad_norm));
}

TEST(TraceWire, ByteByByteFeedingGivesTheSameMessages) {
  const std::vector<WireMessage> sent = every_kind();
  const std::string bytes = encode(sent);
  WireDecoder decoder;
  std::vector<WireMessage> got;
  for (char c : bytes) {
    decoder.feed(std::string_view(&c, 1));
    for (auto& m : drain(decoder)) got.push_back(std::move(m));
  }
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) expect_same(got[i], sent[i]);
}

// Every strict prefix of a stream decodes the whole frames it holds and waits for the rest, never
// throwing: a socket read may stop anywhere.
TEST(TraceWire, TruncatedInputNeedsMoreAndNeverThrows) {
  const std::vector<WireMessage> sent = every_kind();
  const std::string bytes = encode(sent);
  std::vector<std::size_t> frame_ends;
  std::string so_far;
  for (const WireMessage& m : sent) {
    append_frame(so_far, m);
    frame_ends.push_back(so_far.size());
  }
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    WireDecoder decoder;
    decoder.feed(std::string_view(bytes).substr(0, cut));
    std::vector<WireMessage> got;
    ASSERT_NO_THROW(got = drain(decoder)) << "cut at " << cut;
    const auto whole = static_cast<std::size_t>(
        std::upper_bound(frame_ends.begin(), frame_ends.end(), cut) - frame_ends.begin());
    EXPECT_EQ(got.size(), whole) << "cut at " << cut;
  }
}

TEST(TraceWire, OversizedFrameIsRefusedFromItsLengthAlone) {
  std::string bytes(4, '\0');
  put_u32(bytes, 0, 0xFFFFFFFFu);
  EXPECT_EQ(decode_error(bytes), "frame of 4294967295 bytes; at most 1048576");
  EXPECT_EQ(decode_error(std::string(4, '\0')), "frame of 0 bytes; expected at least its message kind");
  // In a stream, after its hello, too.
  EXPECT_EQ(decode_error(encode({sample_hello()}) + bytes, WireDecoder::Opening::hello),
            "frame of 4294967295 bytes; at most 1048576");
}

// Bytes of another program sent to a dashboard (`printf 'GET / HTTP/1.0\r\n\r\n' | nc HOST PORT`) are not
// fsdplab's, and say so: their first 4 bytes were once read as a frame length and refused as one of 542393671.
TEST(TraceWire, AStreamNotOpeningWithAHelloIsNotAnFsdplabStream) {
  const std::string expected =
      "; an fsdplab trace stream opens with a hello frame: a 4-byte length, the hello's message kind 00, then the "
      "magic 46 4c 44 57 (\"FLDW\")";
  const std::string http = "GET / HTTP/1.0\r\n\r\n";
  EXPECT_EQ(decode_error(http, WireDecoder::Opening::hello),
            "not an fsdplab trace stream: it opens with 47 45 54 20 2f 20 48 54 54 (\"GET / HTT\")" + expected);
  std::string huge(4, '\xff');  // a frame of 4294967295 bytes
  EXPECT_EQ(decode_error(huge + "and more nonsense", WireDecoder::Opening::hello),
            "not an fsdplab trace stream: it opens with ff ff ff ff 61 6e 64 20 6d (\"....and m\")" + expected);
  // Frames of fsdplab's, but no hello first: an event.
  EXPECT_TRUE(testing::contains(decode_error(encode({sample_event()}), WireDecoder::Opening::hello),
                                "not an fsdplab trace stream: it opens with "))
      << decode_error(encode({sample_event()}), WireDecoder::Opening::hello);
  // The opening is judged once all of it came, byte by byte or not; until then the decoder waits.
  WireDecoder decoder;
  for (std::size_t i = 0; i + 1 < 9; ++i) {
    decoder.feed(http.substr(i, 1));
    ASSERT_NO_THROW(EXPECT_FALSE(decoder.next().has_value())) << "byte " << i;
  }
  decoder.feed(http.substr(8, 1));
  EXPECT_TRUE(testing::contains(testing::error_of([&] { drain(decoder); }), "(\"GET / HTT\")"));
  // A hello with a changed magic is refused at its opening too.
  std::string hello = encode({sample_hello()});
  hello[4 + 1] ^= 0x20;
  EXPECT_TRUE(testing::contains(decode_error(hello, WireDecoder::Opening::hello),
                                " 00 00 00 00 66 4c 44 57 (\"-....fLDW\"); an fsdplab trace stream opens"))
      << decode_error(hello, WireDecoder::Opening::hello);
}

TEST(TraceWire, CorruptedFramesNameWhatWasExpected) {
  const std::string hello = encode({sample_hello()});
  const std::string event = encode({sample_event()});
  const std::string counter = encode({sample_counter()});
  // Body offsets: [0..4) length, [4] kind, then the fields.
  {
    std::string b = event;
    b[4] = 9;
    EXPECT_EQ(decode_error(b), "message kind 9; expected 0..5");
  }
  {
    std::string b = event;
    b[4 + 1 + 4] = 9;  // after the event's rank: its lane
    EXPECT_EQ(decode_error(b), "lane 9; expected 0..4");
  }
  {
    std::string b = counter;
    b[4 + 1 + 4 + 8] = 8;  // after the counter's rank and time: its tag
    EXPECT_EQ(decode_error(b), "memory tag 8; expected 0..7");
  }
  {
    std::string b = hello;
    b[4 + 1] ^= 0x20;  // the magic
    EXPECT_TRUE(testing::contains(decode_error(b), "this is not an fsdplab trace stream")) << decode_error(b);
  }
  {
    std::string b = hello;
    b[4 + 1 + 4] = 7;  // the version
    EXPECT_EQ(decode_error(b), "wire format version 7; this build reads version 6");
  }
  {
    std::string b = hello;
    put_u32(b, 4 + 1 + 4 + 2, 1u << 20);  // the run id's length
    EXPECT_EQ(decode_error(b), "run id of 1048576 bytes; at most 4096");
  }
  {
    std::string b = hello;
    put_u32(b, 4 + 1 + 4 + 2, 200);  // longer than the frame, under the string limit
    EXPECT_TRUE(testing::contains(decode_error(b), "run id needs 200 bytes; the frame has")) << decode_error(b);
  }
  {
    // A frame that claims one byte more than its fields: a byte the decoder will not ignore.
    std::string b = encode({WireBye{}});
    b.push_back('\0');
    put_u32(b, 0, 2);
    EXPECT_EQ(decode_error(b), "bye frame of 2 bytes has 1 byte after its last field");
  }
}

TEST(TraceWire, SemanticBoundsAreCheckedOnBothSides) {
  TraceEvent backwards = sample_event();
  std::swap(backwards.begin, backwards.end);
  std::string out = "kept";
  EXPECT_TRUE(testing::contains(testing::error_of([&] { append_frame(out, backwards); }),
                                "trace wire: cannot send event 'reduce_scatter unit 7' ends at"));
  EXPECT_EQ(out, "kept");  // nothing half-written
  TraceEvent long_name = sample_event();
  long_name.name.assign(kWireMaxString + 1, 'n');
  EXPECT_EQ(testing::error_of([&] { append_frame(out, long_name); }),
            "trace wire: cannot send event name of 4097 bytes; at most 4096");
  EXPECT_EQ(testing::error_of([&] { append_frame(out, WireHello{"r", 4, 4, "sim", 1}); }),
            "trace wire: cannot send hello of ranks 4..4; expected within 0..3");
  EXPECT_EQ(testing::error_of([&] { append_frame(out, WireHello{"r", 0, 4, "sim", 1, "both"}); }),
            "trace wire: cannot send hello of mode 'both'; expected sync, async or none");

  // The same bounds on bytes that did not come from append_frame: patch a valid frame.
  std::string step = encode({sample_step()});
  // [4] kind, [5..9) rank, [9..13) step, [13..21) begin, [21..29) end: end := 0 < begin = 100.
  for (std::size_t i = 21; i < 29; ++i) step[i] = 0;
  EXPECT_EQ(decode_error(step), "step 9 ends at 0 ns, before it begins at 100 ns");
  std::string hello = encode({sample_hello()});
  // [4] kind, [5..9) magic, [9..11) version, [11..15) run id length, 6 bytes, then rank, ranks, world.
  put_u32(hello, 11 + 4 + 6, 0x7FFFFFFF);  // rank: rank + ranks would overflow an int
  EXPECT_EQ(decode_error(hello), "hello of ranks 2147483647..2147483648; expected within 0..3");
  std::string event = encode({sample_event()});
  // A dependency is its rank (4 bytes), op (8) and reason (1).
  std::string bad_reason = event;
  bad_reason[event.size() - 1 - 1] = 2;  // the last dependency's reason, before the link
  EXPECT_EQ(decode_error(bad_reason), "dependency reason 2; expected 0..1");
  put_u32(event, event.size() - 1 - 4 - 2 * 13, 0xFFFFFFFFu);  // the dependency count, before 2 deps and the link
  EXPECT_EQ(decode_error(event), "event 'reduce_scatter unit 7' with 4294967295 dependencies; at most 4096");

  // A failure's race: its flags are 0 or 1, its accesses' spans run forwards, its rank is one a world may have.
  std::string failed = encode({WireFailed{"x", std::nullopt}});
  failed[4 + 1 + 4 + 1] = 2;  // [4] kind, the error "x" (4 + 1 bytes), then the race flag
  EXPECT_EQ(decode_error(failed), "failure's race flag 2; expected 0 or 1");
  WireFailed backwards_race = sample_race_failure();
  std::swap(backwards_race.race->later.begin, backwards_race.race->later.end);
  EXPECT_TRUE(testing::contains(testing::error_of([&] { append_frame(out, backwards_race); }),
                                "race's later access 'all_gather (root).flat_param_full' ends at"));
  WireFailed far_rank = sample_race_failure();
  far_rank.race->rank = kWireMaxWorld;
  EXPECT_EQ(testing::error_of([&] { append_frame(out, far_rank); }),
            "trace wire: cannot send a race on rank 1024; expected 0..1023");
}

// Numbers a receiver does arithmetic on are bounded at the decoder: one well-formed step frame
// numbered 2^31-2 once sent the step-time panel's axis loop around forever; times near the int64 ends
// overflow a duration.
TEST(TraceWire, ExtremeStepsAndTimesAreRefused) {
  std::string step = encode({sample_step()});
  ASSERT_EQ(step.size(), 4u + 1 + 4 + 4 + 8 + 8 + 8 + 8);  // ... begin, end, loss, gradient norm
  put_u32(step, 9, 0x7FFFFFFEu);  // [9..13) the step number
  EXPECT_EQ(decode_error(step), "step 2147483646; expected 0 to 1073741824");
  std::string out;
  TraceEvent late = sample_event();
  late.step = std::numeric_limits<int>::max();
  EXPECT_EQ(
      testing::error_of([&] { append_frame(out, late); }),
      "trace wire: cannot send event 'reduce_scatter unit 7' of step 2147483647; expected -1 (none) to 1073741824");
  TraceEvent endless = sample_event();
  endless.end = std::numeric_limits<SimTime>::max();
  EXPECT_TRUE(testing::contains(testing::error_of([&] { append_frame(out, endless); }),
                                "at 9223372036854775807 ns; expected within +-2305843009213693952 ns"));
  CounterSample early = sample_counter();
  early.time = std::numeric_limits<SimTime>::min();
  EXPECT_TRUE(testing::contains(testing::error_of([&] { append_frame(out, early); }),
                                "counter at -9223372036854775808 ns; expected within"));
  EXPECT_TRUE(out.empty());
}

// Random bytes, and valid streams with bytes flipped, inserted or cut: the decoder returns messages,
// waits, or throws Error — never anything else, never a crash (ASan and UBSan watch this in CI).
TEST(TraceWire, FuzzedBytesNeverCrashTheDecoder) {
  std::mt19937_64 rng(20240601);
  const std::string valid = encode(every_kind()) + encode(every_kind());
  int errors = 0;
  int clean = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes;
    if (round % 4 == 0) {
      bytes.resize(rng() % 200);
      for (char& c : bytes) c = static_cast<char>(rng());
    } else {
      bytes = valid;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % bytes.size();
        switch (rng() % 3) {
          case 0: bytes[at] = static_cast<char>(rng()); break;
          case 1: bytes.insert(at, 1, static_cast<char>(rng())); break;
          default: bytes.erase(at, 1 + rng() % 8); break;
        }
        if (bytes.empty()) bytes.push_back('\0');
      }
    }
    // Streams, their opening checked first, and frames alone.
    WireDecoder decoder(round % 2 ? WireDecoder::Opening::hello : WireDecoder::Opening::any_frame);
    // In random pieces, as a socket delivers them.
    std::size_t at = 0;
    try {
      while (at < bytes.size()) {
        const std::size_t piece = std::min<std::size_t>(1 + rng() % 64, bytes.size() - at);
        decoder.feed(std::string_view(bytes).substr(at, piece));
        at += piece;
        drain(decoder);
      }
      ++clean;
    } catch (const Error&) {
      ++errors;
    }
    ASSERT_LE(decoder.buffered(), kWireMaxFrame + 4 + 64);
  }
  // Both outcomes happen: the loop exercises the checks, not only the happy path.
  EXPECT_GT(errors, 1000);
  EXPECT_GT(clean, 10);
}

}  // namespace
}  // namespace fsdplab
