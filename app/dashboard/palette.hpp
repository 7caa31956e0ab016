// palette.hpp — the dashboard's colours, one place: what an op category and a memory tag look like
// in every panel (the timeline's zones, the memory panel's stacks, the legends).
//
// Communication is warm (all-gather orange, reduce-scatter red), compute cool (blue), copies green,
// host work grey, so overlap reads at a glance. Memory tags follow their kind: parameters blue,
// gradients red, optimizer state purple, activations green, communication buffers amber, workspace grey.
#pragma once
#include <imgui.h>

#include "engine/runtime/mem_tag.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab::app {

constexpr ImU32 rgb(unsigned r, unsigned g, unsigned b) { return IM_COL32(r, g, b, 255); }

constexpr ImU32 category_color(OpCategory c) {
  switch (c) {
    case OpCategory::compute: return rgb(66, 133, 244);
    case OpCategory::all_gather: return rgb(251, 140, 0);
    case OpCategory::reduce_scatter: return rgb(229, 57, 53);
    case OpCategory::all_reduce: return rgb(216, 27, 96);
    case OpCategory::broadcast: return rgb(255, 193, 7);
    case OpCategory::memcpy: return rgb(67, 160, 71);
    case OpCategory::host: return rgb(144, 144, 144);
  }
  return rgb(255, 255, 255);
}

constexpr ImU32 mem_tag_color(MemTag t) {
  switch (t) {
    case MemTag::param_shard: return rgb(30, 90, 200);
    case MemTag::param_full: return rgb(110, 170, 250);
    case MemTag::grad_shard: return rgb(190, 40, 40);
    case MemTag::grad_full: return rgb(250, 120, 110);
    case MemTag::optim_state: return rgb(140, 80, 190);
    case MemTag::activation: return rgb(70, 170, 90);
    case MemTag::comm_buffer: return rgb(240, 170, 40);
    case MemTag::workspace: return rgb(150, 150, 150);
  }
  return rgb(255, 255, 255);
}

// Folded zones (many ops narrower than a pixel drawn as one block) and selections.
constexpr ImU32 kFoldedColor = rgb(92, 96, 130);  // a slate apart from host work's grey
constexpr ImU32 kSelectionColor = IM_COL32(255, 255, 255, 40);
constexpr ImU32 kPeakColor = rgb(255, 80, 80);
constexpr ImU32 kExpectedColor = rgb(255, 235, 59);
constexpr ImU32 kDeviceMemoryColor = rgb(240, 240, 240);  // the device's memory, where a bar or chart reaches it
// What went wrong, in every panel: a failed run's mark in the step-time table, the Run panel's errors, the
// replay's unreadable files, the remote streams lost or dropped, the FlatParameter map a task could not lay out.
constexpr ImU32 kFailedColor = rgb(255, 89, 89);

}  // namespace fsdplab::app
