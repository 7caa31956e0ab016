// CRC-32 as zlib computes it (the checksum of training checkpoints): the standard check values, the
// slicing-by-8 loop against the bit-by-bit definition at every length and alignment, chaining, files.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/crc32.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span<const char>(s)); }

// The definition, one bit at a time.
std::uint32_t crc32_bitwise(std::span<const std::byte> bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const std::byte b : bytes) {
    crc ^= static_cast<std::uint8_t>(b);
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32, CheckValues) {
  EXPECT_EQ(crc32(bytes_of("")), 0u);
  EXPECT_EQ(crc32(bytes_of("123456789")), 0xCBF43926u);  // the catalogue's check value for CRC-32/ISO-HDLC
  EXPECT_EQ(crc32(bytes_of("The quick brown fox jumps over the lazy dog")), 0x414FA339u);  // zlib.crc32
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
  EXPECT_EQ(crc32_hex(0x7u), "00000007");
}

TEST(Crc32, EveryLengthAndAlignmentMatchesTheDefinition) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t n = 0; n + offset <= data.size(); n += (n < 40 ? 1 : 37)) {
      const auto piece = bytes_of(data).subspan(offset, n);
      ASSERT_EQ(crc32(piece), crc32_bitwise(piece)) << "offset " << offset << ", " << n << " bytes";
    }
}

TEST(Crc32, ChainsLikeZlib) {
  const std::string a = "fsdplab training ", b = "checkpoint, in two pieces of odd sizes";
  EXPECT_EQ(crc32(crc32(bytes_of(a)), bytes_of(b)), crc32(bytes_of(a + b)));
}

class Crc32File : public testing::TempDirTest {};

TEST_F(Crc32File, DigestIsSizeAndCrcOfTheWholeFile) {
  std::string data(3 * (1 << 20) + 12345, '\0');  // several of digest_file's 1 MiB pieces, and a tail
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 24);
  spit(path("f.bin"), data);
  const FileDigest d = digest_file(path("f.bin"));
  EXPECT_EQ(d.bytes, data.size());
  EXPECT_EQ(d.crc32, crc32_bitwise(bytes_of(data)));
  spit(path("empty"), "");
  EXPECT_EQ(digest_file(path("empty")).bytes, 0u);
  EXPECT_TRUE(testing::contains(testing::error_of([&] { digest_file(path("missing")); }), "cannot open '"));
}

}  // namespace
}  // namespace fsdplab
