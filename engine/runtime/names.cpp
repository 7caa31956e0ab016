// names.cpp — parsing of the runtime's small enums from their names (CLI flags, preset files, traces).
#include "engine/runtime/dtype.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/mem_tag.hpp"

namespace fsdplab {

DType parse_dtype(std::string_view name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "i32") return DType::i32;
  fail("unknown dtype '", name, "'; expected f32, bf16 or i32");
}

MemTag parse_mem_tag(std::string_view name) {
  for (MemTag t : kAllMemTags)
    if (mem_tag_name(t) == name) return t;
  std::string known;
  for (MemTag t : kAllMemTags) known += (known.empty() ? "" : ", ") + std::string(mem_tag_name(t));
  fail("unknown memory tag '", name, "'; expected one of: ", known);
}

}  // namespace fsdplab
