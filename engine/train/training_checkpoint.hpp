// training_checkpoint.hpp — an FSDP run's training state on disk and back, for an exact resume.
//
// A checkpoint is a folder, written after N completed steps:
//   manifest.json        written last: the format and its version, the step N, the run the state
//                        belongs to (checkpoint_run below), each unit's layout (every parameter's
//                        offset and size in its flat buffer: Resharding, below), every other file's
//                        size and CRC-32 (crc32.hpp), and the CRC-32 of the manifest itself.
//   rank<r>.safetensors  rank r's state, all f32: "flat_param.<unit>", its master shard of each unit,
//                        and "optim.<target>.<state>", its optimizer state shards (AdamW exp_avg and
//                        exp_avg_sq, SGD momentum_buffer); metadata: rank, shard rank, world, step
//                        and the optimizer's step count. The sharded checkpoint, what a resume reads.
//                        (safetensors, so any safetensors reader can inspect it.)
//   model.safetensors    the whole model, assembled on the host by rank 0 from the ranks' shard
//   config.json          files, as --save-final writes it (byte for byte the same folder at that
//                        step): what --load-init, PyTorch and GPT2LMHeadModel.from_pretrained read.
//
// Why a resume is exact: besides those files nothing carries over from one step to the next. The
// batch of a step is a pure function of (seed, step), or of (token file, step) (synthetic_data.hpp);
// there is no dropout, no loss scaling and no random state; gathered parameters and gradients are
// computed afresh every step; replicated strategies (zero1, zero2) rebuild their whole parameters
// from the shards with the all-gather their optimizer step ends with. So a run resumed after step N
// computes bit for bit what the uninterrupted run computes from step N + 1 on. (Virtual times are
// not part of that: a resumed run's clocks start at 0.)
//
// Atomic. Every rank writes into a staging folder DIR.fsdplab-tmp beside DIR (same file system, so a
// rename can move it), each file flushed to disk (fsync); rank 0 writes the whole model and then the
// manifest, flushes the folder, and swaps it in: when DIR does not exist, rename(2); when it does,
// renameat2(RENAME_EXCHANGE), which swaps the two names in one step, after which the previous
// checkpoint (now under the staging name) is deleted; then it flushes DIR's parent. At every moment
// DIR is the previous checkpoint, whole, or the new one, whole. On a file system that cannot exchange
// names (RENAME_EXCHANGE needs Linux >= 3.15 and ext4, xfs, btrfs, tmpfs or the like), the previous
// one is renamed to DIR.fsdplab-old first and the new one to DIR second: between those two renames
// DIR does not exist, and a resume from it then names DIR.fsdplab-old, the previous checkpoint, whole.
// A failure before the swap (a rank that throws, a full disk, an unwritable folder) fails the run and
// leaves DIR as it was. The staging folder is removed once every rank has stopped (train_fsdp calls
// discard_checkpoint_staging then; removing it earlier would race with ranks still writing into it),
// and the next save into DIR removes whatever a crash left there: the names are fixed, not a
// process's. A folder is only ever replaced if it is empty or holds a manifest.json
// (check_checkpoint_target), never other contents; DIR.fsdplab-tmp and DIR.fsdplab-old are fsdplab's.
//
// Resharding (--reshard). The rank files hold flat shards, and a flat layout is a function of the world size,
// the strategy's shard group, the alignment and the units (--wrap): at another W a parameter starts at another
// offset, a shard boundary cuts it elsewhere, and the padding moves. So the manifest also records each unit's
// layout (every parameter's offset and size in its flat buffer), and a run that differs from the checkpoint's
// in those alone may continue it by parameter: each rank copies, for every slice of a parameter its new shards
// hold, the same elements of the saved shards, master values and optimizer state alike (restore_rank_state).
// The state after step N moves bit for bit; the steps after it sum the gradients over this run's ranks and
// round as its W does. At the same W, where every strategy and wrap computes the same bits, the resumed run is
// still bit-identical to the uninterrupted one.
//
// Ranks meet at barriers (Communicator::barrier: no device op, no virtual time), so writing a
// checkpoint leaves the training timeline as it is; the whole model is assembled from the files, not
// all-gathered on the devices, so no rank ever holds the whole model in device memory for it.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/train/crc32.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab {

inline constexpr int kTrainingCheckpointVersion = 1;

// What a checkpoint must agree with for this run to continue it exactly, as the manifest keeps it:
//   {"model":     {"name", "identity"}            identity: the config keys --load-init checks
//    "data":      {"seed", "batch", "seq", "file",   what the batch of a step is a function of, and
//                  "accumulate"}                    its micro-batches (they order the gradient sums)
//    "optimizer": {"name", every hyper-parameter}
//    "fsdp":      {"world", "strategy", "shard_group", "param_dtype", "reduce_dtype", "align", "wrap",
//                  "units": [{"name", "params", "padded_numel", "shard_numel", "layout_crc32"}, ...]}}
// Options that change only the schedule (--mode, --prefetch, --max-inflight, --buffers) are not in it:
// numerics run at launch and do not depend on the schedule, so a run may resume under others.
// The units are those `tasks` lay out for `model` (a fresh, unmaterialised build of the run's model);
// layout_crc32 covers every parameter's name, offset and size in the flat buffer. `data_file` is the --data
// file's digest (BatchSource::check_every_token), nullopt for synthetic data.
nlohmann::json checkpoint_run(const RunConfig& run, const FsdpOptions& options, const FsdpTasks& tasks,
                              BuiltModel& model, const std::optional<FileDigest>& data_file);
// Where two checkpoint_run values differ, one entry per difference joined by "; " ("" when they agree):
// "data.seed (--seed): `saved_side` has 0, `mine_side` has 1". The unit layout follows from the model and the
// FSDP options, so it is compared only when those agree (one cause, one message).
std::string run_differences(const nlohmann::json& saved, const nlohmann::json& mine, std::string_view saved_side,
                            std::string_view mine_side);

// Before any rank starts: an Error unless `dir` can become a checkpoint. It must not exist, or be an
// empty folder, or hold a checkpoint (a manifest.json): anything else is refused, never replaced. Its
// parent folder is created if missing, and a folder of this process's own is created there and removed again, so an
// unwritable place fails now rather than after the first K steps.
void check_checkpoint_target(const std::filesystem::path& dir);

// Where the saved run kept each parameter, for a resharding resume: its world size and shard group, and per
// parameter its unit, its first element in that unit's flat buffer, its size and the unit's shard size. Shard s
// of every unit is in the file of world rank s (shard group 0: RankGroups splits by rank / S).
struct SavedLayout {
  struct Place {
    std::string unit;
    std::int64_t offset = 0;
    std::int64_t numel = 0;
    std::int64_t shard_numel = 0;
  };
  int world = 0;
  int shard_group = 0;
  std::map<std::string, Place, std::less<>> params;
};

// A checkpoint folder, checked. Read-only: every rank then reads the files it needs (restore_rank_state).
class TrainingCheckpoint {
 public:
  // Checks, before any rank starts, in this order, an Error naming the first problem and the folder:
  // manifest.json exists, is whole (its own CRC-32) and of this format version; the run it was saved
  // by equals `run` (checkpoint_run of this run; every difference named with the checkpoint's value
  // and this run's, and the option that sets it), or with `reshard` differs only in the layout (world,
  // strategy, shard group, alignment, wrap) and recorded its layouts; every file the saved run wrote is
  // listed, there, of the listed size and CRC-32 (reads every byte).
  static TrainingCheckpoint open(const std::filesystem::path& dir, const nlohmann::json& run, bool reshard = false);

  const std::filesystem::path& dir() const { return dir_; }
  int step() const { return step_; }  // completed steps: a resumed run goes on with step index step()
  // The saved layout where this run's differs and the state moves by parameter; null where the files are this
  // run's own shards.
  const SavedLayout* moved_from() const { return moved_from_ ? &*moved_from_ : nullptr; }

 private:
  TrainingCheckpoint(std::filesystem::path dir, int step, std::optional<SavedLayout> moved_from)
      : dir_(std::move(dir)), step_(step), moved_from_(std::move(moved_from)) {}
  std::filesystem::path dir_;
  int step_ = 0;
  std::optional<SavedLayout> moved_from_;
};

// This rank's part of a resume: reads rank<r>.safetensors (r = the world rank) into its master
// shards, its optimizer's state tensors and step count; where the checkpoint is moved_from() another layout,
// the slices of every saved shard file its new shards hold (see Resharding above). Collective where the strategy
// replicates the parameters over a shard group (zero1, zero2): the chunks are all-gathered into the whole parameters,
// as the optimizer step does. An Error naming the file for a tensor that is missing, misshapen or that
// this run does not have, or metadata (rank, step) that disagrees with the manifest.
void restore_rank_state(const TrainingCheckpoint& checkpoint, FullyShardedModel& sharded, Optimizer& optimizer);

// Collective over every rank of sharded.rank().world, between steps: writes the checkpoint of `step`
// completed steps to `dir`, atomically (above). `run` is checkpoint_run's, `model_config` the model's
// config.json. `written` (may be empty) runs on each rank after it wrote its own file and before the
// checkpoint is committed: tests make a rank fail there. Returns when the checkpoint is in place; after
// a failure, once every rank has stopped, call discard_checkpoint_staging.
void save_training_checkpoint(const std::filesystem::path& dir, const nlohmann::json& run,
                              const nlohmann::json& model_config, int step, FullyShardedModel& sharded,
                              Optimizer& optimizer, const std::function<void()>& written = {});

// How long a rank may wait for its peers in a run that writes checkpoints. While rank 0 alone assembles
// the whole model and checksums every file, the others wait at a barrier, and LocalWorld takes a wait
// without progress longer than its timeout (5 s by default) for a stalled rank: gpt2 124M at W = 2 keeps
// them waiting about 4 s. So: the time to write and read back the checkpoint's bytes (parameters,
// optimizer state, the whole model) at 20 MB/s, or `usual` where that is longer.
std::chrono::milliseconds checkpoint_wait_timeout(Model& model, const OptimizerSpec& spec,
                                                  std::chrono::milliseconds usual);

// Removes the staging folder a failed save left beside `dir`, if any. Only once no rank runs any more.
void discard_checkpoint_staging(const std::filesystem::path& dir) noexcept;

}  // namespace fsdplab
