// safetensors.hpp — tensors in Hugging Face's safetensors format, read and written by us.
//
// It is the format of fsdplab's model checkpoints because it is the one transformers reads and
// writes: a GPT-2 trained here loads into GPT2LMHeadModel, and theirs loads here. A file is
//   8 bytes   N, a little-endian u64: the length of the header
//   N bytes   the header: a UTF-8 JSON object that starts with '{' and may be padded with spaces,
//               {"__metadata__": {"format": "pt"},                        optional, str -> str
//                "wte.weight": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]},
//                ...}
//   the rest  the data buffer: each tensor's elements packed row-major, little-endian, in bytes
//             [begin, end) of the buffer. The ranges tile the buffer: no gap, no overlap, nothing
//             after the last. A shape of [] is a scalar; a dimension of 0 makes an empty tensor.
// (The specification is the README of Hugging Face's safetensors repository; behaviour checked
// against their reference implementation, safetensors 0.8.)
//
// Plain host memory, no Tensor: the checkpoint code copies bytes between these spans and tensors.
// transformers' from_pretrained refuses a file whose metadata has no "format" of "pt": pass
// {{"format", "pt"}} when writing a checkpoint for it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/dtype.hpp"

namespace fsdplab {

// "F32", "BF16", "I32": how the format names our dtypes.
std::string_view safetensors_dtype_name(DType dtype);

// One tensor to write. `bytes` must be numel(shape) * dtype_size(dtype) bytes, row-major, in the
// host's (little-endian) byte order.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes `entries` and `metadata` to `path`. The layout is the one Hugging Face's serializer picks,
// so for the same tensors the bytes are the same as theirs (given at most one metadata key: they
// keep metadata in a hash map of random order; we write keys sorted):
//   - tensors sorted by dtype, F32 then I32 then BF16 (their order: wider alignment first), then
//     by name, whatever the order given. The data buffer starts 8-aligned (below) and each tensor
//     then starts at a multiple of its element size, so a reader that maps the file can use the
//     bytes in place;
//   - the header compact JSON: "__metadata__" first (omitted when empty), then the tensors in data
//     order, each {"dtype", "shape", "data_offsets"}; padded with spaces to a multiple of 8 bytes.
// Deterministic: the same entries in any order and the same metadata give the same bytes.
// Atomic: written to `path` + ".tmp", flushed to disk, then renamed over `path`, so an interrupted
// save leaves the old file or the new one, never half a file (a symbolic link is followed, a device
// or a FIFO written in place, a folder refused: output_file.hpp).
// Errors (before anything is written): a duplicate name, the name "__metadata__", a negative
// dimension, a byte size that is not numel x element size, a name or metadata string that is not
// valid UTF-8; and any failure to write, each naming the path.
void write_safetensors(const std::filesystem::path& path, std::span<const SafetensorsEntry> entries,
                       const std::map<std::string, std::string>& metadata = {});

// A safetensors file read into memory and checked: every number in the header is checked against
// the file before it is used (see safetensors.cpp), so a truncated, corrupt or hostile file is an
// Error naming the path, never a crash, an out-of-bounds read or a huge allocation.
class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype;                 // as the file names it: "F32", "BF16", "I32", or any other
                                       // safetensors dtype ("F16", "F64", "I64", "U8", "BOOL", ...)
    std::vector<std::int64_t> shape;   // [] is a scalar
    std::span<const std::byte> bytes;  // into the file's data; aligned to the element size when the
                                       // writer laid the file out as Hugging Face's does (ours does)
  };

  static SafetensorsFile read(const std::filesystem::path& path);

  // Move-only: the entries' spans point into this object's buffer, which a move keeps and a copy
  // would not.
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in data-buffer order
  std::vector<std::string> names() const;                          // same order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view name) const { return index_.contains(name); }

  // The tensor `name`; an Error "<path> has no tensor '<name>'" if there is none.
  const Entry& at(std::string_view name) const;

  // The bytes of `name`, checked to be `shape` of our `dtype`; otherwise an Error such as
  // "ckpt.safetensors: h.0.attn.c_attn.weight: expected [768, 2304] F32, file has [768, 2304] BF16".
  std::span<const std::byte> expect(std::string_view name, DType dtype, const std::vector<std::int64_t>& shape) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::vector<std::byte> data_;  // the data buffer; entries_[i].bytes point into it
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// Every tensor of the file at `path` as f32 values, by name: what a saved model holds (--save-final), for
// comparing two runs element by element. An Error naming the tensor for one that is not F32.
std::map<std::string, std::vector<float>> read_f32_tensors(const std::filesystem::path& path);

}  // namespace fsdplab
