// tensor.hpp — Storage (one tagged allocation on a device) and Tensor (a typed, shaped, contiguous
// view of part of a Storage).
//
// Views share storage: a FlatParameter's parameters are Tensors viewing its flat buffer, so a write
// through a view changes the flat buffer and nothing is copied. A Storage can free its memory and
// allocate it again while views of it live on (FSDP's reshard: the full buffer goes, the parameter
// views stay); touching data while it is freed is an Error. A meta tensor has a shape and no
// storage at all (task 1 builds the model that way); touching its data is an Error.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/device.hpp"
#include "engine/runtime/dtype.hpp"
#include "engine/runtime/mem_tag.hpp"

namespace fsdplab {

using Shape = std::vector<std::int64_t>;
std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Storage {
 public:
  enum class Start { allocated, freed };
  // `Start::freed` gives a storage with a size and no memory yet: FSDP's full buffers begin that way,
  // so building a unit never holds it whole.
  // `stream`: the stream whose work the memory is for (the caching allocator's pool; device.hpp).
  Storage(Device& device, std::int64_t bytes, MemTag tag, std::string name, Start start = Start::allocated,
          Lane stream = Lane::compute);

  Device& device() const { return *device_; }
  std::int64_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // The stream the memory is for; Lane::host for pinned host memory (CPU offload).
  Lane stream() const { return stream_; }

  bool allocated() const { return static_cast<bool>(allocation_); }
  // Gives the memory back to the device (stream-ordered); views keep their shape.
  void free();
  // Takes memory of the same size and tag again. Its contents are undefined until written.
  void allocate();
  // Hands the memory to the caller and leaves this storage freed, as free() does: the caller keeps the
  // block until the streams still using it are done (a deferred free, CUDA's record_stream made explicit).
  Allocation release();
  // `bytes` bytes from `offset` of its block, in its current allocation: what an op declares it reads or writes; an
  // Error when freed.
  Access access(std::int64_t offset, std::int64_t bytes) const;
  // The memory's first byte, for op bodies (the sim device refuses it outside one: Device::check_raw_pointer); an
  // Error when freed or on a dry run.
  std::byte* data() const;
  // The same address, never to be read or written by the host: to hand to a peer, whose op body uses it.
  std::byte* address() const;

 private:
  const Block& allocated_block() const;  // an Error when freed

  Device* device_;
  std::int64_t bytes_;
  MemTag tag_;
  std::string name_;
  Lane stream_;
  Allocation allocation_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no shape, no storage

  // `stream`: the stream the memory is for (device.hpp's per-stream pools); compute unless a
  // collective stream writes it first.
  static Tensor empty(Device& device, Shape shape, DType dtype, MemTag tag, std::string name = "",
                      Lane stream = Lane::compute);
  // As empty, but the storage starts freed: nothing is allocated until storage().allocate().
  static Tensor unallocated(Device& device, Shape shape, DType dtype, MemTag tag, std::string name = "",
                            Lane stream = Lane::compute);
  static Tensor meta(Shape shape, DType dtype, std::string name = "");
  // A view of `storage` starting `offset` elements in.
  static Tensor view_of(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, DType dtype,
                        std::string name = "");

  bool defined() const { return defined_; }
  bool is_meta() const { return defined_ && !storage_; }
  // True when data() would succeed: allocated storage on a device that is not on a dry run.
  bool has_data() const;

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const;  // negative counts from the end
  std::int64_t numel() const { return numel_; }
  std::int64_t nbytes() const { return numel_ * static_cast<std::int64_t>(dtype_size(dtype_)); }
  DType dtype() const { return dtype_; }
  std::int64_t offset() const { return offset_; }
  const std::string& name() const { return name_; }
  Tensor& set_name(std::string name) {
    name_ = std::move(name);
    return *this;
  }
  // "name [2, 3] f32" — for error messages; "an undefined tensor" for a default-constructed one.
  std::string describe() const;

  Device& device() const;
  Storage& storage() const;
  const std::shared_ptr<Storage>& storage_ptr() const { return storage_; }

  // Views: contiguous ranges of this tensor's elements; they share its storage.
  Tensor view(std::int64_t offset, Shape shape) const;
  Tensor reshape(Shape shape) const;
  Tensor rows(std::int64_t start, std::int64_t count) const;  // along dim 0

  // Raw element pointers; an Error for meta tensors, freed storage, dry runs and the wrong dtype.
  float* f32() const;
  std::uint16_t* bf16() const;
  std::int32_t* i32() const;
  template <class T>
  T* data() const;
  // The first byte of this tensor, whatever its dtype: for collectives and copies that move bytes.
  std::byte* raw() const;
  // raw()'s address outside an op's body, for a peer's op to use (a collective's input): the host never touches it.
  std::byte* device_address() const;

  // The byte range this tensor covers in its block: what an op declares it reads or writes.
  Access access() const;
  // True when both tensors view some of the same bytes of one storage: an op writing one while
  // reading the other may read what it has already overwritten.
  bool overlaps(const Tensor& other) const;

  // Host copies, checked by the race detector as host accesses (the host must have synchronised).
  std::vector<float> to_vector() const;   // bf16 is widened; an Error for i32
  void copy_from(std::span<const float> values) const;  // rounded to bf16 when the tensor is bf16
  std::vector<std::int32_t> to_indices() const;   // i32 only
  void copy_from(std::span<const std::int32_t> values) const;

 private:
  std::byte* byte_data(DType expected) const;

  bool defined_ = false;
  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  std::string name_;
};

template <>
inline float* Tensor::data<float>() const { return f32(); }
template <>
inline std::uint16_t* Tensor::data<std::uint16_t>() const { return bf16(); }
template <>
inline std::int32_t* Tensor::data<std::int32_t>() const { return i32(); }

}  // namespace fsdplab
