// safetensors.cpp — the safetensors reader and writer; the format is described in safetensors.hpp.
//
// The reader trusts nothing in the file. What it checks, in order, and why:
//   - the header length is at most what follows it (else: a truncated file, or not a safetensors
//     file), checked against the file's size before anything is allocated, so a hostile length
//     cannot ask for terabytes; and at most 100 MB, the reference reader's limit, so a file we
//     accept is one Hugging Face's code accepts too;
//   - the header starts with '{' (the specification requires it) and is JSON with no key twice in
//     any object (the specification forbids it: readers that keep the first and readers that keep
//     the last of two "w" would load different tensors from one file);
//   - each tensor has a dtype the format defines, a shape of non-negative integers, and
//     data_offsets [begin, end] with begin <= end and end - begin = numel x element size, computed
//     without overflow (else the offsets and the shape disagree on what the bytes are);
//   - sorted by offset, the byte ranges tile the data buffer from byte 0 to its end: an overlap
//     would make two tensors alias, a gap or a tail would be bytes that belong to no tensor, and a
//     range past the end means the file was cut short.
// Only then is the data buffer allocated (its size is now known to be the file's) and read.
#include "engine/nn/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>

#include "engine/runtime/error.hpp"
#include "engine/runtime/json_input.hpp"
#include "engine/runtime/output_file.hpp"
#include "engine/tensor/tensor.hpp"  // shape_str

namespace fsdplab {

// Tensor bytes go between the file and memory unchanged, and callers copy them into floats and
// ints: that is only right on a host whose byte order is the format's.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using Json = nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr std::string_view kMetadataKey = "__metadata__";

// Every dtype of the format (safetensors 0.8) with its element size in bits. The reader keeps
// tensors of any of them; only F32, BF16 and I32 map to a DType. Sub-byte types (F4, F6) pack their
// elements, so such a tensor must fill whole bytes.
struct FileDType {
  std::string_view name;
  std::uint64_t bits;
};
constexpr FileDType kFileDTypes[] = {
    {"BOOL", 8},        {"U8", 8},          {"I8", 8},      {"F8_E5M2", 8},  {"F8_E4M3", 8}, {"F8_E8M0", 8},
    {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},     {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},        {"F32", 32},    {"C64", 64},     {"F64", 64},    {"I64", 64},
    {"U64", 64},        {"F4", 4},          {"F6_E2M3", 6}, {"F6_E3M2", 6}};

const FileDType* find_file_dtype(std::string_view name) {
  for (const FileDType& t : kFileDTypes)
    if (t.name == name) return &t;
  return nullptr;
}

std::string file_dtype_list() {
  std::string list;
  for (const FileDType& t : kFileDTypes) list += (list.empty() ? "" : ", ") + std::string(t.name);
  return list;
}

// numel(shape) x bits, or nothing when it does not fit in 64 bits.
std::optional<std::uint64_t> size_in_bits(const std::vector<std::int64_t>& shape, std::uint64_t bits) {
  std::uint64_t total = bits;
  for (const std::int64_t d : shape) {
    const auto dim = static_cast<std::uint64_t>(d);
    if (dim != 0 && total > std::numeric_limits<std::uint64_t>::max() / dim) return std::nullopt;
    total *= dim;
  }
  return total;
}

// Parses the header, refusing a key that appears twice in one object.
Json parse_header(const std::string& text, const std::string& file) {
  try {
    return parse_json_input(text, {.unique_keys = true});
  } catch (const Error& e) {
    fail(file, ": the header is not valid JSON: ", e.what());
  }
}

// A tensor as the header describes it, checked on its own.
struct HeaderTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // in the data buffer
};

HeaderTensor parse_tensor(const std::string& file, const std::string& name, const Json& v) {
  const std::string what = file + ": tensor '" + name + "'";
  if (!v.is_object()) fail(what, " is ", json_shown(v), "; expected an object with dtype, shape and data_offsets");
  const auto field = [&](const char* key) -> const Json& {
    const auto it = v.find(key);
    if (it == v.end()) fail(what, " has no '", key, "'");
    return *it;
  };

  HeaderTensor t;
  t.name = name;
  const Json& dtype = field("dtype");
  if (!dtype.is_string()) fail(what, " has dtype ", json_shown(dtype), "; expected a string such as \"F32\"");
  t.dtype = dtype.get<std::string>();
  const FileDType* type = find_file_dtype(t.dtype);
  if (type == nullptr) fail(what, " has dtype ", json_shown(dtype), "; expected one of ", file_dtype_list());

  const Json& shape = field("shape");
  const auto is_dim = [](const Json& d) {
    return d.is_number_unsigned() && d.get<std::uint64_t>() <= std::uint64_t{std::numeric_limits<std::int64_t>::max()};
  };
  if (!shape.is_array() || !std::all_of(shape.begin(), shape.end(), is_dim))
    fail(what, " has shape ", json_shown(shape), "; expected an array of non-negative integers");
  for (const Json& d : shape) t.shape.push_back(d.get<std::int64_t>());

  const Json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() || offsets[0].get<std::uint64_t>() > offsets[1].get<std::uint64_t>())
    fail(what, " has data_offsets ", json_shown(offsets), "; expected [begin, end] with 0 <= begin <= end");
  t.begin = offsets[0].get<std::uint64_t>();
  t.end = offsets[1].get<std::uint64_t>();
  // Other fields are ignored, as the reference reader ignores them.

  const std::optional<std::uint64_t> bits = size_in_bits(t.shape, type->bits);
  if (!bits) fail(what, " has shape ", shape_str(t.shape), " of ", t.dtype, ", whose size overflows 64 bits");
  if (*bits % 8 != 0)
    fail(what, " is ", shape_str(t.shape), " ", t.dtype, " = ", *bits, " bits; expected a whole number of bytes");
  if (t.end - t.begin != *bits / 8)
    fail(what, " is ", shape_str(t.shape), " ", t.dtype, " = ", *bits / 8, " bytes, but its data_offsets [", t.begin,
         ", ", t.end, "] hold ", t.end - t.begin);
  return t;
}

// Checks that the tensors' ranges tile [0, data_size) and returns the tensors in data order.
std::vector<HeaderTensor> check_layout(std::vector<HeaderTensor> tensors, std::uint64_t data_size,
                                       const std::string& file) {
  // Empty tensors share their offset with a neighbour; the name orders them deterministically.
  std::sort(tensors.begin(), tensors.end(), [](const HeaderTensor& a, const HeaderTensor& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t at = 0;  // where the previous tensor ends
  const HeaderTensor* previous = nullptr;
  for (const HeaderTensor& t : tensors) {
    if (t.begin < at)  // `previous` holds byte t.begin: it is not empty, since it ends past t.begin
      fail(file, ": tensor '", t.name, "' at bytes [", t.begin, ", ", t.end, ") of the data overlaps '", previous->name,
           "' at [", previous->begin, ", ", previous->end, "); tensors must not share bytes");
    if (t.begin > at)
      fail(file, ": tensor '", t.name, "' starts at byte ", t.begin, " of the data, but ",
           previous ? "'" + previous->name + "' ends" : std::string("the data starts"), " at byte ", at, ": a gap of ",
           t.begin - at, " bytes; tensors must tile the data buffer");
    at = t.end;
    previous = &t;
  }
  if (at > data_size)
    fail(file, ": the tensors need ", at, " bytes of data, but the file has ", data_size,
         " after the header: it is truncated, or the offsets are wrong");
  if (at < data_size)
    fail(file, ": the tensors end at byte ", at, " of the data, but the file has ", data_size,
         " bytes after the header: ", data_size - at, " bytes belong to no tensor");
  return tensors;
}

void read_exactly(std::ifstream& in, void* to, std::uint64_t n, const std::string& file, const char* what) {
  if (n == 0) return;
  in.read(static_cast<char*>(to), static_cast<std::streamsize>(n));
  check(static_cast<std::uint64_t>(in.gcount()) == n, "cannot read '", file, "': it ended ", in.gcount(),
        " bytes into the ", n, " bytes of ", what, " (did it change while being read?)");
}

// Where HF's serializer puts a dtype: its Dtype enum sorted descending, F32 > I32 > BF16.
int write_rank(DType t) { return t == DType::f32 ? 0 : t == DType::i32 ? 1 : 2; }

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  return dtype == DType::f32 ? "F32" : dtype == DType::bf16 ? "BF16" : "I32";
}

// ---- writing ------------------------------------------------------------------------------------

void write_safetensors(const std::filesystem::path& path, std::span<const SafetensorsEntry> entries,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  std::set<std::string_view> names;
  for (const SafetensorsEntry& e : entries) {
    const std::string what = "cannot write '" + file + "': tensor '" + e.name + "'";
    check(e.name != kMetadataKey, what, ": the name is reserved for the metadata");
    check(names.insert(e.name).second, what, " is given twice");
    check(std::all_of(e.shape.begin(), e.shape.end(), [](std::int64_t d) { return d >= 0; }), what, " has shape ",
          shape_str(e.shape), "; expected non-negative dimensions");
    const std::optional<std::uint64_t> bits = size_in_bits(e.shape, 8 * dtype_size(e.dtype));
    check(bits.has_value(), what, " has shape ", shape_str(e.shape), ", whose size overflows 64 bits");
    check(e.bytes.size() == *bits / 8, what, " is ", shape_str(e.shape), " ", safetensors_dtype_name(e.dtype), " = ",
          *bits / 8, " bytes, but ", e.bytes.size(), " bytes were given");
  }

  std::vector<const SafetensorsEntry*> order;
  for (const SafetensorsEntry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return std::make_tuple(write_rank(a->dtype), std::string_view(a->name)) <
           std::make_tuple(write_rank(b->dtype), std::string_view(b->name));
  });

  // ordered_json keeps insertion order: metadata first, then the tensors in data order.
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (!metadata.empty()) json[std::string(kMetadataKey)] = metadata;
  std::uint64_t offset = 0;
  for (const SafetensorsEntry* e : order) {
    const std::uint64_t end = offset + e->bytes.size();
    json[e->name] = {{"dtype", std::string(safetensors_dtype_name(e->dtype))},
                     {"shape", e->shape},
                     {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header;
  try {
    header = json.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("cannot write '", file, "': a tensor name or metadata string is not valid UTF-8: ", json_error_text(e));
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // the data buffer starts 8-aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));

  // On disk before the rename: otherwise a crash soon after could leave the new name on an empty
  // file. (The directory is not synced: after a crash the old file may be back, which is whole.)
  write_output_file(path, "", [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(length), sizeof length);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const SafetensorsEntry* e : order)
      out.write(reinterpret_cast<const char*>(e->bytes.data()), static_cast<std::streamsize>(e->bytes.size()));
  }, /*flush_to_disk=*/true);
}

// ---- reading ------------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::read(const std::filesystem::path& path) {
  SafetensorsFile result;
  result.path_ = path.string();
  const std::string& file = result.path_;

  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  check(!ec, "cannot read '", file, "': ", ec.message());
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot read '", file, "': cannot open it");
  check(size >= 8, file, ": the file has ", size, " bytes; expected at least 8, the header length");

  unsigned char length[8];
  read_exactly(in, length, 8, file, "the header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | length[i];
  check(n <= size - 8, file, ": the header length is ", n, " bytes, but only ", size - 8,
        " bytes follow it: the file is truncated, or not a safetensors file");
  check(n <= kMaxHeaderBytes, file, ": the header length is ", n, " bytes; expected at most ", kMaxHeaderBytes);

  std::string text(n, '\0');
  read_exactly(in, text.data(), n, file, "the header");
  if (n == 0 || text[0] != '{') {
    std::ostringstream first;
    if (n > 0) first << " (byte 0x" << std::hex << int(static_cast<unsigned char>(text[0])) << ")";
    fail(file, ": the header ", n == 0 ? "is empty" : "does not start with '{'", first.str(),
         "; expected a JSON object");
  }
  const Json header = parse_header(text, file);  // an object: JSON that starts with '{'

  std::vector<HeaderTensor> tensors;
  for (const auto& [key, value] : header.items()) {
    if (key != kMetadataKey) {
      tensors.push_back(parse_tensor(file, key, value));
      continue;
    }
    if (!value.is_object()) fail(file, ": __metadata__ is ", json_shown(value), "; expected an object of strings");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string()) fail(file, ": __metadata__ has '", k, "' = ", json_shown(v), "; expected a string");
      result.metadata_[k] = v.get<std::string>();
    }
  }
  const std::uint64_t data_size = size - 8 - n;
  tensors = check_layout(std::move(tensors), data_size, file);

  result.data_.resize(data_size);
  read_exactly(in, result.data_.data(), data_size, file, "tensor data");
  for (HeaderTensor& t : tensors) {
    result.index_.emplace(t.name, result.entries_.size());
    result.entries_.push_back(Entry{std::move(t.name), std::move(t.dtype), std::move(t.shape),
                                    std::span<const std::byte>(result.data_).subspan(t.begin, t.end - t.begin)});
  }
  return result;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::at(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) fail(path_, " has no tensor '", name, "' (it has ", entries_.size(), " tensors)");
  return entries_[it->second];
}

std::span<const std::byte> SafetensorsFile::expect(std::string_view name, DType dtype,
                                                   const std::vector<std::int64_t>& shape) const {
  const Entry& e = at(name);
  const std::string_view want = safetensors_dtype_name(dtype);
  if (e.dtype != want || e.shape != shape)
    fail(path_, ": ", name, ": expected ", shape_str(shape), " ", want, ", file has ", shape_str(e.shape), " ",
         e.dtype);
  return e.bytes;
}

std::map<std::string, std::vector<float>> read_f32_tensors(const std::filesystem::path& path) {
  const SafetensorsFile file = SafetensorsFile::read(path);
  std::map<std::string, std::vector<float>> out;
  for (const SafetensorsFile::Entry& e : file.entries()) {
    check(e.dtype == "F32", path.string(), ": ", e.name, " is ", e.dtype, "; expected F32 tensors only");
    std::vector<float> values(e.bytes.size() / sizeof(float));
    std::memcpy(values.data(), e.bytes.data(), e.bytes.size());
    out[e.name] = std::move(values);
  }
  return out;
}

}  // namespace fsdplab
