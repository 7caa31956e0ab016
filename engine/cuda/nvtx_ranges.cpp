// nvtx_ranges.cpp — NVTX start/end ranges in the "fsdplab" domain (nvtx3 is header-only: the tool that
// attaches, through NVTX_INJECTION64_PATH, supplies the implementation).
#include "engine/cuda/nvtx_ranges.hpp"

#include <nvtx3/nvToolsExt.h>

namespace fsdplab::cuda {
namespace {

nvtxDomainHandle_t fsdplab_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("fsdplab");
  return domain;
}

// ARGB, one colour per phase, so a step reads as forward, backward, optimizer at a glance.
std::uint32_t phase_color(const std::string& phase) {
  if (phase == "forward") return 0xFF4C9BE8;
  if (phase == "backward") return 0xFFE8864C;
  if (phase == "optimizer") return 0xFF6BBF59;
  return 0xFF9E9E9E;
}

}  // namespace

std::string nvtx_range_name(const OpLabels& labels) {
  std::string name;
  const auto add = [&](const std::string& part) {
    if (!name.empty()) name += ' ';
    name += part;
  };
  if (labels.step >= 0) add("step " + std::to_string(labels.step + 1));  // as `fsdplab run` counts: from 1
  if (!labels.phase.empty()) add(labels.phase);
  if (labels.unit >= 0) add("unit " + std::to_string(labels.unit));
  return name;
}

NvtxRanges::NvtxRanges(int rank) : category_(static_cast<std::uint32_t>(rank) + 1) {
  // Category 0 means "none" to NVTX: rank r is category r + 1, named for the rank.
  nvtxDomainNameCategoryA(fsdplab_domain(), category_, ("rank " + std::to_string(rank)).c_str());
}

NvtxRanges::~NvtxRanges() { end(); }

void NvtxRanges::end() {
  if (open_) nvtxDomainRangeEnd(fsdplab_domain(), range_);
  open_ = false;
}

void NvtxRanges::label(const OpLabels& labels) {
  end();
  const std::string name = nvtx_range_name(labels);
  if (name.empty()) return;
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.category = category_;
  attributes.colorType = NVTX_COLOR_ARGB;
  attributes.color = phase_color(labels.phase);
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name.c_str();
  range_ = nvtxDomainRangeStartEx(fsdplab_domain(), &attributes);
  open_ = true;
}

}  // namespace fsdplab::cuda
