// crc32.hpp — CRC-32 checksums of bytes and files, for checkpoints (training_checkpoint.hpp).
//
// The CRC-32 of zlib, PNG and gzip (ISO-HDLC: reflected polynomial 0xEDB88320, initial value and final
// XOR 0xFFFFFFFF), so a file's checksum can be checked by hand:
//   python3 -c "import sys, zlib; print('%08x' % zlib.crc32(open(sys.argv[1], 'rb').read()))" FILE
// CRC-32 detects every burst error up to 32 bits (a flipped byte, a torn sector boundary) and any
// other corruption with probability 1 - 2^-32; it guards against accidents, not against tampering.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace fsdplab {

// The CRC-32 of `previous`'s bytes followed by `bytes`, given crc32 of the former (0 for none), as
// zlib's crc32(previous, bytes): crc32(crc32(0, a), b) == crc32(0, a + b).
std::uint32_t crc32(std::uint32_t previous, std::span<const std::byte> bytes);
inline std::uint32_t crc32(std::span<const std::byte> bytes) { return crc32(0, bytes); }

// "cbf43926": eight lowercase hex digits, as checkpoint manifests write a CRC-32.
std::string crc32_hex(std::uint32_t crc);

// A file's size in bytes and its CRC-32, read in pieces (never the whole file in memory).
struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};
// An Error naming the path when it cannot be read.
FileDigest digest_file(const std::filesystem::path& path);

}  // namespace fsdplab
