#include "app/dashboard/exercise_notes.hpp"

#include <array>
#include <optional>
#include <string_view>

#include "engine/fsdp/fsdp_tasks.hpp"

namespace fsdplab::app {
namespace {

struct Note {
  int task;
  std::optional<FsdpEventKind> kind;  // nullopt: the task's paragraph for any other kind
  std::string_view text;
};

using K = FsdpEventKind;

// The exercises' words at each seam (labs/NN-*/README.md says it at length).
constexpr std::array kNotes = {
    Note{1, std::nullopt,
         "Meta init builds the model as shapes only and materialises this rank's shard alone, every element "
         "from the counter-based RNG keyed by (seed, parameter, index), so the shard equals the same slice of "
         "the unsharded initialisation."},
    Note{2, std::nullopt,
         "The FlatParameter concatenates a unit's parameters into one buffer padded to a multiple of W; rank r "
         "owns chunk r, and each parameter is a view into the unsharded buffer, never a copy."},
    Note{3, K::collective_issued,
         "all_gather issued the unit's gather: every rank's shard into the full buffer, on the all-gather "
         "stream, with the `gathered` event recorded behind it. The host does not wait for it."},
    Note{3, K::collective_done,
         "The gather has finished on the all-gather stream. The compute stream may use the unit only after "
         "it: that is wait_for_unshard's event wait, never a host synchronisation."},
    Note{3, K::pre_forward,
         "Before the unit's forward: all_gather issued the gather and wait_for_unshard made the compute stream "
         "wait for its event (device.wait(Lane::compute, gathered)). The host went on at once; a host "
         "synchronize here would block the CPU and lose the overlap with the previous unit's compute."},
    Note{3, K::post_forward,
         "After the unit's forward: reshard_after_forward decided whether its gathered parameters are freed "
         "now (full and hybrid: yes; grad_op: no; the root keeps them for the backward, which needs it first)."},
    Note{3, std::nullopt, "Task 3 gathers a unit before its forward and frees it after."},
    Note{4, K::pre_backward,
         "Before the unit's backward: its parameters are gathered again if the forward freed them, and "
         "zero_gradient prepared the full gradient buffer the backward accumulates into."},
    Note{4, K::post_backward,
         "After the unit's backward: reduce_scatter summed the full gradient over the ranks into this rank's "
         "grad shard, divided by W (the mean), and the full buffers were freed."},
    Note{4, K::collective_issued,
         "reduce_scatter issued the unit's gradient reduction on the reduce-scatter stream: the full gradient "
         "in, this rank's chunk of the mean out."},
    Note{4, std::nullopt, "Task 4 gathers again for the backward and reduce-scatters the gradient into the shard."},
    Note{5, K::optimizer_step,
         "The optimizer stepped on this rank's f32 shard only, with optimizer state of the shard's size: no "
         "rank holds the whole parameters or the whole state."},
    Note{5, std::nullopt,
         "Task 5 steps the shard; in the ZeRO forms the updated shards are then gathered so every rank holds "
         "the whole parameters again."},
    Note{6, K::collective_issued,
         "A prefetch decision: the next unit's gather is issued ahead of its need on its own stream, ordered "
         "by events only, with at most --max-inflight gathered units holding memory."},
    Note{6, std::nullopt,
         "Task 6 orders the streams by events and decides what is fetched ahead (forward prefetch, backward "
         "pre or post) and where gathered parameters live (allocated, or the two-buffer pool)."},
    Note{7, std::nullopt,
         "Integration: the model as nested units with a root, and the training loop's own collectives, such as "
         "the loss all-reduce, around the tasks."},
    Note{8, std::nullopt,
         "Hybrid shard: gradients are reduce-scattered inside the shard group, then all-reduced across the "
         "replica groups that hold the same shard."},
    Note{9, std::nullopt,
         "CPU offload: shards and gradients move between host and device on the memcpy stream, and the "
         "optimizer steps on the CPU."},
};

}  // namespace

std::string task_heading(int task) {
  if (task < 1 || task > kTaskCount) return "outside the tasks";
  return "Task " + std::to_string(task) + " \u00b7 " + std::string(task_info(task).title);
}

std::string exercise_note(int task, FsdpEventKind kind) {
  if (task < 1 || task > kTaskCount) return "";
  std::string_view text;
  for (const Note& n : kNotes) {
    if (n.task != task) continue;
    if (n.kind == kind) {
      text = n.text;
      break;
    }
    if (!n.kind && text.empty()) text = n.text;
  }
  return std::string(text) + " Exercise: " + std::string(task_info(task).lab) + "/README.md";
}

}  // namespace fsdplab::app
