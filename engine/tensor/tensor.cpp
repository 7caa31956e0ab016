#include "engine/tensor/tensor.hpp"

#include <algorithm>
#include <sstream>

#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"

namespace fsdplab {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (!(d >= 0)) fail("shape ", shape_str(shape), " has a negative dimension");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

// ---- Storage -------------------------------------------------------------------------------------

Storage::Storage(Device& device, std::int64_t bytes, MemTag tag, std::string name, Start start, Lane stream)
    : device_(&device), bytes_(bytes), tag_(tag), name_(std::move(name)), stream_(stream) {
  if (start == Start::allocated) allocate();
}

void Storage::free() { allocation_.reset(); }

Allocation Storage::release() { return std::move(allocation_); }

void Storage::allocate() {
  if (allocation_) return;
  try {
    allocation_ = device_->allocate(bytes_, tag_, stream_);
  } catch (const Error& e) {
    // The device knows the rank, the size and the tag; the storage adds what the memory was for.
    if (name_.empty()) throw;
    fail(e.what(), " (for '", name_, "')");
  }
}

const Block& Storage::allocated_block() const {
  check(allocated(), "storage '", name_, "' (", mem_tag_name(tag_), ", ", bytes_,
        " bytes) is freed; allocate it before use (was it resharded too early?)");
  return *allocation_.block();
}

Access Storage::access(std::int64_t offset, std::int64_t bytes) const {
  const Block& block = allocated_block();
  return Access{block.id, offset, bytes, block.generation};
}

std::byte* Storage::address() const {
  allocated_block();  // the freed check
  check(!device_->dry_run(), "storage '", name_, "' is on a dry-run device: it has a size but no data");
  return allocation_.data();
}

std::byte* Storage::data() const {
  std::byte* at = address();
  device_->check_raw_pointer(*allocation_.block(), name_);
  return at;
}

// ---- Tensor --------------------------------------------------------------------------------------

Tensor Tensor::empty(Device& device, Shape shape, DType dtype, MemTag tag, std::string name, Lane stream) {
  Tensor t = unallocated(device, std::move(shape), dtype, tag, std::move(name), stream);
  t.storage().allocate();
  return t;
}

Tensor Tensor::unallocated(Device& device, Shape shape, DType dtype, MemTag tag, std::string name, Lane stream) {
  const std::int64_t bytes = shape_numel(shape) * static_cast<std::int64_t>(dtype_size(dtype));
  auto storage = std::make_shared<Storage>(device, bytes, tag, name, Storage::Start::freed, stream);
  return view_of(std::move(storage), 0, std::move(shape), dtype, std::move(name));
}

Tensor Tensor::meta(Shape shape, DType dtype, std::string name) {
  Tensor t;
  t.defined_ = true;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.name_ = std::move(name);
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, DType dtype,
                       std::string name) {
  check(storage != nullptr, "Tensor::view_of: no storage for '", name, "'");
  Tensor t = meta(std::move(shape), dtype, std::move(name));
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  if (!(offset >= 0 && (offset + t.numel_) * elem <= storage->bytes()))
    fail("view '", t.name_, "' ", shape_str(t.shape_), " ", dtype_name(dtype), " at element ", offset, " needs ",
         (offset + t.numel_) * elem, " bytes but storage '", storage->name(), "' has ", storage->bytes());
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  return t;
}

bool Tensor::has_data() const {
  return storage_ && storage_->allocated() && !storage_->device().dry_run();
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int k = i < 0 ? i + n : i;
  if (!(k >= 0 && k < n)) fail("dimension ", i, " of ", describe(), ", which has ", n, " dimensions");
  return shape_[static_cast<std::size_t>(k)];
}

std::string Tensor::describe() const {
  if (!defined_) return "an undefined tensor";
  std::ostringstream s;
  s << (name_.empty() ? "tensor" : "'" + name_ + "'") << ' ' << shape_str(shape_) << ' ' << dtype_name(dtype_);
  if (is_meta()) s << " (meta)";
  return s.str();
}

Device& Tensor::device() const { return storage().device(); }

Storage& Tensor::storage() const {
  check(defined_, "use of an undefined tensor");
  if (!(storage_ != nullptr))
    fail(describe(), " is a meta tensor: it has a shape but no storage (materialise it first)");
  return *storage_;
}

Tensor Tensor::view(std::int64_t offset, Shape shape) const {
  const std::int64_t n = shape_numel(shape);
  if (!(offset >= 0 && offset + n <= numel_))
    fail("view of ", n, " elements at offset ", offset, " of ", describe(), ", which has ", numel_);
  if (is_meta()) return meta(std::move(shape), dtype_, name_);
  return view_of(storage_, offset_ + offset, std::move(shape), dtype_, name_);
}

Tensor Tensor::reshape(Shape shape) const {
  if (!(shape_numel(shape) == numel_))
    fail("reshape of ", describe(), " to ", shape_str(shape), ": element counts differ (", numel_, " vs ",
         shape_numel(shape), ")");
  return view(0, std::move(shape));
}

Tensor Tensor::rows(std::int64_t start, std::int64_t count) const {
  if (!(ndim() >= 1)) fail("rows() of a scalar ", describe());
  if (!(start >= 0 && count >= 0 && start + count <= shape_[0]))
    fail("rows [", start, ", ", start + count, ") of ", describe());
  Shape shape = shape_;
  shape[0] = count;
  const std::int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  return view(start * row, std::move(shape));
}

std::byte* Tensor::byte_data(DType expected) const {
  if (!(dtype_ == expected)) fail(describe(), " accessed as ", dtype_name(expected));
  return storage().data() + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

std::byte* Tensor::raw() const { return byte_data(dtype_); }

std::byte* Tensor::device_address() const {
  return storage().address() + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

float* Tensor::f32() const { return reinterpret_cast<float*>(byte_data(DType::f32)); }
std::uint16_t* Tensor::bf16() const { return reinterpret_cast<std::uint16_t*>(byte_data(DType::bf16)); }
std::int32_t* Tensor::i32() const { return reinterpret_cast<std::int32_t*>(byte_data(DType::i32)); }

Access Tensor::access() const {
  return storage().access(offset_ * static_cast<std::int64_t>(dtype_size(dtype_)), nbytes());
}

bool Tensor::overlaps(const Tensor& other) const {
  if (!storage_ || storage_ != other.storage_ || numel_ == 0 || other.numel_ == 0) return false;
  const std::int64_t begin = offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
  const std::int64_t other_begin = other.offset_ * static_cast<std::int64_t>(dtype_size(other.dtype_));
  return begin < other_begin + other.nbytes() && other_begin < begin + nbytes();
}

// The host's copies go through the device, which checks the host has synchronized (sim) or copies
// across the bus (cuda); bf16 is widened or rounded on the host side.
std::vector<float> Tensor::to_vector() const {
  if (!(dtype_ != DType::i32)) fail(describe(), ": to_vector() reads floats; use to_indices() for i32");
  std::vector<float> out(static_cast<std::size_t>(numel_));
  if (dtype_ == DType::f32) {
    device().host_read(access(), reinterpret_cast<std::byte*>(out.data()), "host read of " + describe());
  } else {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(numel_));
    device().host_read(access(), reinterpret_cast<std::byte*>(bits.data()), "host read of " + describe());
    std::transform(bits.begin(), bits.end(), out.begin(), bf16_to_float);
  }
  return out;
}

void Tensor::copy_from(std::span<const float> values) const {
  if (!(static_cast<std::int64_t>(values.size()) == numel_))
    fail("copy of ", values.size(), " values into ", describe());
  if (!(dtype_ != DType::i32)) fail(describe(), ": copy_from(floats) into an i32 tensor");
  if (dtype_ == DType::f32) {
    device().host_write(access(), reinterpret_cast<const std::byte*>(values.data()), "host write of " + describe());
  } else {
    std::vector<std::uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(), float_to_bf16);
    device().host_write(access(), reinterpret_cast<const std::byte*>(bits.data()), "host write of " + describe());
  }
}

std::vector<std::int32_t> Tensor::to_indices() const {
  if (!(dtype_ == DType::i32)) fail(describe(), ": to_indices() reads i32; use to_vector() for floats");
  std::vector<std::int32_t> out(static_cast<std::size_t>(numel_));
  device().host_read(access(), reinterpret_cast<std::byte*>(out.data()), "host read of " + describe());
  return out;
}

void Tensor::copy_from(std::span<const std::int32_t> values) const {
  if (!(static_cast<std::int64_t>(values.size()) == numel_))
    fail("copy of ", values.size(), " indices into ", describe());
  if (!(dtype_ == DType::i32)) fail(describe(), ": copy_from(indices) into a ", dtype_name(dtype_), " tensor");
  device().host_write(access(), reinterpret_cast<const std::byte*>(values.data()), "host write of " + describe());
}

}  // namespace fsdplab
