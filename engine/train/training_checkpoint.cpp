#include "engine/train/training_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "engine/fsdp/memory_model.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/nn/safetensors.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/json_input.hpp"
#include "engine/train/crc32.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kFormat = "fsdplab training checkpoint";
constexpr std::string_view kRankFormat = "fsdplab rank state";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kModelFile = "model.safetensors";  // with config.json: checkpoint.hpp's folder
constexpr const char* kConfigFile = "config.json";
constexpr const char* kManifestCrcKey = "manifest_crc32";
// A manifest lists a file per rank and the run's identity: some 100 KB at 1024 ranks.
constexpr std::uint64_t kMaxManifestBytes = 16u << 20;
constexpr const char* kStaging = ".fsdplab-tmp";
constexpr const char* kOld = ".fsdplab-old";

std::string rank_file(int rank) { return "rank" + std::to_string(rank) + ".safetensors"; }
// The tensors of a rank file: a unit's master shard, and an optimizer target's state (a target is a unit's shard).
std::string param_tensor(const std::string& unit) { return "flat_param." + unit; }
std::string state_tensor(const std::string& target, const std::string& state) {
  return "optim." + target + "." + state;
}

// The files a checkpoint of `world` ranks holds besides the manifest.
std::vector<std::string> data_files(int world) {
  std::vector<std::string> files;
  for (int r = 0; r < world; ++r) files.push_back(rank_file(r));
  files.push_back(kModelFile);
  files.push_back(kConfigFile);
  return files;
}

// `dir` as an absolute path without a trailing separator, so that its name and its parent are defined.
fs::path clean(const fs::path& dir) {
  check(!dir.empty(), "checkpoint folder: an empty path");
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  check(!ec, "checkpoint folder '", dir.string(), "': ", ec.message());
  if (p.filename().empty()) p = p.parent_path();
  check(p.has_parent_path() && p != p.root_path() && p.filename() != "." && p.filename() != "..",
        "checkpoint folder '", dir.string(), "': name a folder of its own");
  return p;
}

// DIR.fsdplab-tmp (the staging folder) and DIR.fsdplab-old (the fallback swap's). Fixed names, not a
// process id's: whatever a crash leaves there is removed by the next save into DIR.
fs::path sibling(const fs::path& dir, const std::string& suffix) {
  return dir.parent_path() / (dir.filename().string() + suffix);
}

std::string errno_text(int error) { return std::generic_category().message(error); }

// Flushes a file's or a folder's contents (a folder: its entries) to disk.
void flush_to_disk(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  check(fd >= 0, "cannot open '", path.string(), "' to flush it to disk: ", errno_text(errno));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  check(rc == 0, "cannot flush '", path.string(), "' to disk: ", errno_text(error));
}

// The manifest's own checksum: the CRC-32 of its compact dump without the checksum (keys sorted, so the
// same content always dumps the same).
std::string manifest_crc(const Json& manifest_without_crc) {
  const std::string text = manifest_without_crc.dump();
  return crc32_hex(crc32(std::as_bytes(std::span<const char>(text.data(), text.size()))));
}

void write_manifest(const fs::path& dir, Json manifest) {
  manifest[kManifestCrcKey] = manifest_crc(manifest);
  const fs::path path = dir / kManifest;
  const std::string text = manifest.dump(2) + "\n";
  std::FILE* out = std::fopen(path.c_str(), "wb");
  check(out != nullptr, "cannot create '", path.string(), "': ", errno_text(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0 &&
            ::fsync(::fileno(out)) == 0;
  const int error = errno;
  ok = std::fclose(out) == 0 && ok;
  check(ok, "cannot write '", path.string(), "': ", errno_text(error));
}

// ---- what a checkpoint must match ------------------------------------------------------------------

// The option that sets a field of checkpoint_run, for messages.
std::string option_of(const std::string& field) {
  static const std::map<std::string, std::string> options = {{"model.name", "--model"},
                                                             {"data.seed", "--seed"},
                                                             {"data.batch", "--batch"},
                                                             {"data.seq", "--seq"},
                                                             {"data.file", "--data"},
                                                             {"optimizer.name", "--optimizer"},
                                                             {"data.file.bytes", "--data: the file is another"},
                                                             {"data.file.crc32", "--data: the file's contents changed"},
                                                             {"optimizer.lr", "--lr"},
                                                             {"optimizer.momentum", "--momentum"},
                                                             {"optimizer.max_grad_norm", "--clip-grad-norm"},
                                                             {"fsdp.world", "--world"},
                                                             {"fsdp.strategy", "--strategy"},
                                                             {"fsdp.shard_group", "--strategy/--hybrid-group"},
                                                             {"fsdp.param_dtype", "--precision"},
                                                             {"fsdp.reduce_dtype", "--reduce-dtype"},
                                                             {"fsdp.wrap", "--wrap"},
                                                             {"data.accumulate", "--accumulate"}};
  if (const auto it = options.find(field); it != options.end()) return " (" + it->second + ")";
  if (field.starts_with("model.identity.")) return " (--model/--preset)";
  return "";
}

std::string shown(const Json* value) { return value ? value->dump() : std::string("nothing"); }

// Whose run each side of a comparison is: "the checkpoint" and "this run", or "rank 0" and "rank 3".
struct Sides {
  std::string_view saved, mine;
};

// Every leaf where `saved` and `mine` differ, as "field (option): the checkpoint has X, this run has Y".
void differences(const Json* saved, const Json* mine, const std::string& field, const Sides& sides,
                 std::vector<std::string>& out) {
  if (saved && mine && saved->is_object() && mine->is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : saved->items()) keys.insert(k);
    for (const auto& [k, v] : mine->items()) keys.insert(k);
    for (const std::string& k : keys) {
      const Json* s = saved->contains(k) ? &(*saved)[k] : nullptr;
      const Json* m = mine->contains(k) ? &(*mine)[k] : nullptr;
      differences(s, m, field.empty() ? k : field + "." + k, sides, out);
    }
    return;
  }
  if (saved && mine && saved->is_array() && mine->is_array() && saved->size() == mine->size()) {
    for (std::size_t i = 0; i < saved->size(); ++i)
      differences(&(*saved)[i], &(*mine)[i], field + "[" + std::to_string(i) + "]", sides, out);
    return;
  }
  if (saved && mine && *saved == *mine) return;
  if (saved && mine && saved->is_array() && mine->is_array()) {
    out.push_back(field + option_of(field) + ": " + std::string(sides.saved) + " has " +
                  std::to_string(saved->size()) + " entries, " + std::string(sides.mine) + " has " +
                  std::to_string(mine->size()));
    return;
  }
  out.push_back(field + option_of(field) + ": " + std::string(sides.saved) + " has " + shown(saved) + ", " +
                std::string(sides.mine) + " has " + shown(mine));
}

}  // namespace

std::string run_differences(const Json& saved, const Json& mine, std::string_view saved_side,
                            std::string_view mine_side) {
  const Sides sides{saved_side, mine_side};
  std::vector<std::string> out;
  const auto section = [](const Json& run, const char* key) -> const Json* {
    return run.is_object() && run.contains(key) ? &run[key] : nullptr;
  };
  for (const char* key : {"model", "data", "optimizer"}) {
    const Json* s = section(saved, key);
    const Json* m = section(mine, key);
    // Another model or optimizer altogether: its name says it, the rest of the section follows from it.
    const auto name = [](const Json* j) { return j && j->is_object() && j->contains("name") ? (*j)["name"] : Json(); };
    if (std::string(key) != "data" && name(s) != name(m)) {
      const Json saved_name = name(s), mine_name = name(m);
      differences(&saved_name, &mine_name, std::string(key) + ".name", sides, out);
    } else {
      differences(s, m, key, sides, out);
    }
  }
  Json saved_fsdp = section(saved, "fsdp") ? *section(saved, "fsdp") : Json();
  Json mine_fsdp = section(mine, "fsdp") ? *section(mine, "fsdp") : Json();
  Json saved_units, mine_units;
  if (saved_fsdp.is_object() && saved_fsdp.contains("units")) {
    saved_units = saved_fsdp["units"];
    saved_fsdp.erase("units");
  }
  if (mine_fsdp.is_object() && mine_fsdp.contains("units")) {
    mine_units = mine_fsdp["units"];
    mine_fsdp.erase("units");
  }
  differences(&saved_fsdp, &mine_fsdp, "fsdp", sides, out);
  if (out.empty()) differences(&saved_units, &mine_units, "fsdp.units", sides, out);
  std::string list;
  for (const std::string& d : out) list += (list.empty() ? "" : "; ") + d;
  return list;
}

namespace {

// ---- one rank's file --------------------------------------------------------------------------------

void write_rank_state(const fs::path& path, int step, FullyShardedModel& sharded, Optimizer& optimizer) {
  FsdpRank& rank = sharded.rank();
  rank.device.synchronize();  // the host reads what the last step's ops wrote
  std::vector<std::vector<float>> values;  // keeps the bytes alive until written
  std::vector<SafetensorsEntry> entries;
  values.reserve(sharded.units().size() + 2 * optimizer.targets().size());
  const auto add = [&](std::string name, std::vector<float> v) {
    // A diverged state never replaces the previous checkpoint: the save fails before anything is swapped in.
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    check(bad == v.end(), "checkpoint after step ", step, ": rank ", rank.world.rank(), "'s ", name, " holds ",
          bad == v.end() ? 0.f : *bad, " at element ", bad - v.begin(),
          "; expected finite values (the training diverged); the previous checkpoint is left as it was");
    values.push_back(std::move(v));
    const std::vector<float>& kept = values.back();
    entries.push_back({std::move(name), DType::f32, {static_cast<std::int64_t>(kept.size())},
                       std::as_bytes(std::span<const float>(kept))});
  };
  for (const FsdpUnit* unit : sharded.units()) add(param_tensor(unit->name), unit->master.to_vector());
  for (std::size_t i = 0; i < optimizer.targets().size(); ++i) {
    for (const Optimizer::StateTensor& s : optimizer.state(i)) {
      // Before step 1 the state is undefined (SGD initialises its buffer on step 1): zeros are written,
      // so the file does not depend on what the memory held.
      add(state_tensor(optimizer.targets()[i].name, s.name),
          optimizer.steps() == 0 ? std::vector<float>(static_cast<std::size_t>(s.tensor.numel()), 0.0f)
                                 : s.tensor.to_vector());
    }
  }
  write_safetensors(path, entries,
                    {{"format", std::string(kRankFormat)},
                     {"rank", std::to_string(rank.world.rank())},
                     {"shard_rank", std::to_string(rank.shard_group.rank())},
                     {"world", std::to_string(rank.world.world())},
                     {"step", std::to_string(step)},
                     {"optimizer_steps", std::to_string(optimizer.steps())}});
}

std::string metadata(const SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata().find(key);
  check(it != file.metadata().end(), file.path(), ": no metadata '", key, "'; expected a rank file of a checkpoint");
  return it->second;
}

std::int64_t metadata_int(const SafetensorsFile& file, const std::string& key) {
  const std::string text = metadata(file, key);
  std::int64_t value = 0;
  std::istringstream in(text);
  check(static_cast<bool>(in >> value) && in.eof(), file.path(), ": metadata '", key, "' is '", text,
        "'; expected an integer");
  return value;
}

// A rank file of shard group 0 (world rank s holds shard s: RankGroups splits by rank / S), checked to hold `shard`.
void check_holds_shard(const SafetensorsFile& file, int shard) {
  check(metadata_int(file, "shard_rank") == shard, file.path(), ": holds shard ", metadata(file, "shard_rank"),
        "; expected shard ", shard);
}

// The whole model from the shard files of shard group 0 (world ranks 0 .. S-1, whose shard ranks are
// 0 .. S-1: RankGroups splits by rank / S), on the host, into DIR/model.safetensors and config.json.
void write_full_model(const fs::path& staging, FullyShardedModel& sharded, const Json& model_config) {
  FsdpRank& rank = sharded.rank();
  const FlatParameterTask& flat = *sharded.tasks().flat_parameter;
  Model& model = sharded.model();
  const std::vector<Parameter*> params = model.parameters();
  std::map<const Parameter*, std::size_t> index;
  std::vector<std::vector<float>> values(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    index[params[i]] = i;
    values[i].assign(static_cast<std::size_t>(params[i]->numel()), 0.0f);
  }
  for (int chunk = 0; chunk < rank.shard_group.world(); ++chunk) {
    const SafetensorsFile file = SafetensorsFile::read(staging / rank_file(chunk));
    check_holds_shard(file, chunk);
    for (const FsdpUnit* unit : sharded.units()) {
      const std::span<const std::byte> bytes =
          file.expect(param_tensor(unit->name), DType::f32, {unit->layout.shard_numel()});
      for (const ShardSlice& s : flat.shard_slices(unit->layout, chunk))
        std::memcpy(values[index.at(s.param)].data() + s.param_begin,
                    bytes.data() + static_cast<std::size_t>(s.shard_offset) * sizeof(float),
                    static_cast<std::size_t>(s.count) * sizeof(float));
    }
  }
  save_checkpoint(staging, model, values, model_config);
}

// Puts `staging` (complete, on disk) in the place of `dir`. See the header for the two ways.
void swap_in(const fs::path& staging, const fs::path& dir) {
  std::error_code ec;
  const bool existed = fs::exists(fs::symlink_status(dir, ec));
  fs::path old;
  if (!existed) {
    fs::rename(staging, dir, ec);
    check(!ec, "cannot move the checkpoint '", staging.string(), "' to '", dir.string(), "': ", ec.message());
  } else if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    old = staging;  // now holds the previous checkpoint
  } else {
    const int error = errno;
    check(error == EINVAL || error == ENOSYS || error == EOPNOTSUPP, "cannot swap the checkpoint '",
          staging.string(), "' with '", dir.string(), "': ", errno_text(error));
    old = sibling(dir, kOld);
    fs::remove_all(old, ec);
    fs::rename(dir, old, ec);
    check(!ec, "cannot move the previous checkpoint '", dir.string(), "' aside: ", ec.message());
    fs::rename(staging, dir, ec);
    if (ec) {
      std::error_code ignored;
      fs::rename(old, dir, ignored);
      fail("cannot move the checkpoint '", staging.string(), "' to '", dir.string(), "': ", ec.message());
    }
  }
  flush_to_disk(dir.parent_path(), true);
  if (!old.empty()) fs::remove_all(old, ec);  // the new checkpoint is in place: a failure here costs only space
}

}  // namespace

// ---- the run a checkpoint belongs to ------------------------------------------------------------------

namespace {

// (parameter name, offset, numel) of each parameter of a unit's flat buffer, in its order.
using LayoutEntries = std::vector<std::tuple<std::string, std::int64_t, std::int64_t>>;

// A unit's layout as one checksum: the run's identity keeps it, and a resharding resume checks the recorded
// layouts against it.
std::uint32_t layout_crc32(const LayoutEntries& entries) {
  std::uint32_t crc = 0;
  for (const auto& [name, offset, numel] : entries) {
    const std::string line = name + " " + std::to_string(offset) + " " + std::to_string(numel) + "\n";
    crc = crc32(crc, std::as_bytes(std::span<const char>(line.data(), line.size())));
  }
  return crc;
}

LayoutEntries layout_entries(const FlatParamLayout& layout) {
  LayoutEntries entries;
  for (const FlatParamEntry& e : layout.entries) entries.emplace_back(e.param->name, e.offset, e.numel);
  return entries;
}

// The token file a run reads, by what it holds and not where it is: its size and CRC-32, so a resume notices
// a file whose contents changed under the same name and accepts the same file by another path. "synthetic"
// for generated tokens.
Json data_identity(const std::optional<FileDigest>& data_file) {
  if (!data_file) return "synthetic";
  return {{"bytes", data_file->bytes}, {"crc32", crc32_hex(data_file->crc32)}};
}

}  // namespace

Json checkpoint_run(const RunConfig& run, const FsdpOptions& options, const FsdpTasks& tasks, BuiltModel& model,
                    const std::optional<FileDigest>& data_file) {
  const int shards = shard_group_size(options, run.world);
  Json units = Json::array();
  for (const UnitPlan& plan : tasks.integration->plan_units(*model.model, model.unit_kinds)) {
    const FlatParamLayout layout = tasks.flat_parameter->plan(plan.params, shards, options.align);
    units.push_back({{"name", plan.name},
                     {"params", layout.entries.size()},
                     {"padded_numel", layout.padded_numel},
                     {"shard_numel", layout.shard_numel()},
                     {"layout_crc32", crc32_hex(layout_crc32(layout_entries(layout)))}});
  }
  Json optimizer = {{"name", run.optimizer_spec().name}};
  for (const auto& [name, value] : make_optimizer(run.optimizer_spec(), {})->hyper_parameters())
    optimizer[name] = value;
  // Only where the run clips: a checkpoint of a run without clipping has no such key, before and since.
  if (run.clip_grad_norm > 0) optimizer["max_grad_norm"] = run.clip_grad_norm;
  return {
      {"model", {{"name", run.model}, {"identity", model.identity}}},
      {"data",
       {{"seed", run.seed},
        {"batch", run.batch},
        {"seq", model.batch.seq},
        {"file", data_identity(data_file)},
        {"accumulate", run.accumulate}}},
      {"optimizer", optimizer},
      {"fsdp",
       {{"world", run.world},
        {"strategy", std::string(strategy_name(options.strategy))},
        {"shard_group", shards},
        {"param_dtype", std::string(dtype_name(options.param_dtype))},
        {"reduce_dtype", std::string(dtype_name(options.reduce_dtype))},
        {"align", options.align},
        {"wrap", run.wrap},
        {"units", units}}},
  };
}

void check_checkpoint_target(const fs::path& requested) {
  const fs::path dir = clean(requested);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dir, ec);
  if (fs::exists(status)) {
    check(fs::is_directory(status), "--checkpoint '", requested.string(),
          "' is not a folder (a file or a symbolic link); refusing to replace it");
    const bool empty = fs::is_empty(dir, ec);
    check(!ec, "--checkpoint '", requested.string(), "': ", ec.message());
    check(empty || fs::exists(dir / kManifest, ec), "--checkpoint '", requested.string(),
          "' is a folder that holds no checkpoint (no ", kManifest, ") and is not empty; refusing to replace it");
  }
  fs::create_directories(dir.parent_path(), ec);
  check(!ec, "--checkpoint '", requested.string(), "': cannot create the folder '", dir.parent_path().string(),
        "': ", ec.message());
  // A folder of this process's own beside DIR, made and removed: every process of an MPI launch checks at once, and
  // a fixed name (the staging folder's) let one process's probe find another's there ("File exists").
  std::string probe = sibling(dir, ".fsdplab-probe-XXXXXX").string();
  check(::mkdtemp(probe.data()) != nullptr, "--checkpoint '", requested.string(), "': cannot create '", probe,
        "' beside it: ", errno_text(errno));
  fs::remove(probe, ec);
}

// ---- opening one ------------------------------------------------------------------------------------

namespace {

// The manifest of `dir`, parsed and checked whole (its own CRC-32) and of this format version.
Json read_manifest(const fs::path& dir, const std::string& where) {
  const fs::path path = dir / kManifest;
  std::error_code ec;
  check(fs::is_directory(dir, ec), where, ": '", dir.string(), "' is not a folder; expected a folder written by ",
        "--checkpoint");
  check(fs::exists(fs::symlink_status(path, ec)), where, ": '", dir.string(), "' holds no ", kManifest,
        "; expected a folder written by --checkpoint");
  // Read by its kind first: a FIFO or a device in its place is refused, never waited on (with the checkpoint's
  // lock held) or read without end.
  const std::string text = read_input_file(path, "checkpoint manifest", kMaxManifestBytes, "written by --checkpoint");
  Json manifest;
  try {
    manifest = parse_json_input(text);
  } catch (const Error& e) {
    fail(where, ": '", path.string(), "' is corrupt: not valid JSON (", e.what(), ")");
  }
  check(manifest.is_object() && manifest.contains(kManifestCrcKey) && manifest[kManifestCrcKey].is_string(), where,
        ": '", path.string(), "' is not a checkpoint manifest (no ", kManifestCrcKey, ")");
  const std::string saved_crc = manifest[kManifestCrcKey].get<std::string>();
  manifest.erase(kManifestCrcKey);
  const std::string actual_crc = manifest_crc(manifest);
  check(saved_crc == actual_crc, where, ": '", path.string(), "' is corrupt: its content has CRC-32 ", actual_crc,
        ", the manifest says ", saved_crc);
  const Json format = manifest.value("format", Json());
  check(format == std::string(kFormat), where, ": '", path.string(), "' has format ", format.dump(), "; expected \"",
        kFormat, "\"");
  const Json version = manifest.value("format_version", Json());
  check(version == kTrainingCheckpointVersion, where, ": '", path.string(), "' is format version ", version.dump(),
        "; this fsdplab reads version ", kTrainingCheckpointVersion);
  const Json step = manifest.value("step", Json());
  check(step.is_number_integer() && step.get<std::int64_t>() >= 0 && step.get<std::int64_t>() <= (1 << 30), where,
        ": '", path.string(), "' has step ", step.dump(), "; expected a count of steps");
  return manifest;
}

// Every file a checkpoint of `world` ranks needs is listed in `files`, there, of its size and CRC-32.
void check_files(const fs::path& dir, const Json& files, int world, const std::string& where) {
  for (const std::string& name : data_files(world)) {
    const fs::path path = dir / name;
    check(files.is_object() && files.contains(name), where, ": '", (dir / kManifest).string(), "' lists no ", name);
    const Json& entry = files[name];
    const Json bytes_field = entry.is_object() ? entry.value("bytes", Json()) : Json();
    const Json crc_field = entry.is_object() ? entry.value("crc32", Json()) : Json();
    // A field left out reads "none"; one written as null reads "null", as JSON spells it.
    const auto shown = [&entry](const char* key) {
      return entry.is_object() && entry.contains(key) ? json_shown(entry[key]) : std::string("none");
    };
    check(entry.is_object(), where, ": '", (dir / kManifest).string(), "' lists ", name, " as ", json_shown(entry),
          "; expected {\"bytes\": a whole number >= 0, \"crc32\": \"8 hex digits\"}");
    check(bytes_field.is_number_unsigned() && crc_field.is_string(), where, ": '", (dir / kManifest).string(),
          "' lists ", name, " with bytes ", shown("bytes"), " and crc32 ", shown("crc32"),
          "; expected {\"bytes\": a whole number >= 0, \"crc32\": \"8 hex digits\"}");
    const std::uint64_t bytes = bytes_field.get<std::uint64_t>();
    const std::string crc = crc_field.get<std::string>();
    std::error_code ec;
    check(fs::is_regular_file(fs::status(path, ec)), where, ": ", name, " is missing (the manifest lists it: ", bytes,
          " bytes, CRC-32 ", crc, ")");
    const std::uint64_t size = fs::file_size(path, ec);
    check(!ec && size == bytes, where, ": '", path.string(), "' has ", size, " bytes, the manifest says ", bytes,
          " (cut short or replaced)");
    const FileDigest digest = digest_file(path);
    check(crc32_hex(digest.crc32) == crc, where, ": '", path.string(), "' is corrupt: its CRC-32 is ",
          crc32_hex(digest.crc32), ", the manifest says ", crc);
  }
}

// The fields of checkpoint_run that only lay the state out: a resharding resume may change them.
constexpr std::array<const char*, 6> kLayoutFields = {"world", "strategy", "shard_group", "align", "wrap", "units"};

// `saved` with `mine`'s layout fields: what remains to differ is what --reshard cannot change.
Json with_layout_of(Json saved, const Json& mine) {
  if (!saved.is_object() || !saved.contains("fsdp") || !saved["fsdp"].is_object()) return saved;
  const auto fsdp = mine.find("fsdp");
  for (const char* field : kLayoutFields)
    if (fsdp != mine.end() && fsdp->contains(field)) saved["fsdp"][field] = (*fsdp)[field];
  return saved;
}

std::string described_layout(const Json& fsdp) {
  return "--world " + fsdp.at("world").dump() + ", --strategy " + fsdp.at("strategy").get<std::string>() +
         " (shard group " + fsdp.at("shard_group").dump() + "), --wrap " + fsdp.at("wrap").get<std::string>();
}

// The saved run's layouts, from the manifest: every parameter's place, each unit's entries checked against the
// layout checksum its run recorded.
SavedLayout saved_layout(const Json& manifest, const std::string& where, const fs::path& dir) {
  const Json& fsdp = manifest.at("run").at("fsdp");
  const std::string file = where + ": '" + (dir / kManifest).string() + "'";
  check(manifest.contains("layouts"), file,
        " records no layouts (its fsdplab predates --reshard), so its state cannot move to another layout; resume it "
        "as it was saved: ",
        described_layout(fsdp));
  SavedLayout saved;
  saved.world = fsdp.at("world").get<int>();
  saved.shard_group = fsdp.at("shard_group").get<int>();
  const Json& units = fsdp.at("units");
  const Json& layouts = manifest.at("layouts");
  check(layouts.is_array() && layouts.size() == units.size(), file, " records ",
        layouts.is_array() ? layouts.size() : 0, " layouts for ", units.size(), " units");
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Json& layout = layouts[u];
    const std::string unit = layout.at("unit").get<std::string>();
    const auto entries = layout.at("params").get<LayoutEntries>();
    const std::int64_t shard_numel = layout.at("shard_numel").get<std::int64_t>();
    check(unit == units[u].at("name").get<std::string>() &&
              crc32_hex(layout_crc32(entries)) == units[u].at("layout_crc32").get<std::string>() &&
              shard_numel == units[u].at("shard_numel").get<std::int64_t>() && shard_numel > 0,
          file, ": the layout recorded for unit '", unit, "' is not the one its run's identity sums up");
    for (const auto& [name, offset, numel] : entries) {
      check(offset >= 0 && numel >= 0 && offset + numel <= shard_numel * saved.shard_group, file, ": parameter '", name,
            "' lies outside unit '", unit, "'");
      check(saved.params.emplace(name, SavedLayout::Place{unit, offset, numel, shard_numel}).second, file,
            ": parameter '", name, "' is in two units");
    }
  }
  return saved;
}

}  // namespace

TrainingCheckpoint TrainingCheckpoint::open(const fs::path& requested, const Json& run, bool reshard) {
  const fs::path dir = clean(requested);
  const std::string where = "--resume '" + requested.string() + "'";
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    const fs::path previous = sibling(dir, kOld);  // where the fallback swap (see the header) moves the previous one
    if (fs::exists(previous / kManifest, ec))
      fail(where, ": no such folder; a save was interrupted while swapping checkpoints, and '", previous.string(),
           "' holds the previous one, whole: rename it to '", dir.filename().string(), "' to resume from it");
    fail(where, ": no such folder");
  }
  try {
    const Json manifest = read_manifest(dir, where);
    const Json saved = manifest.value("run", Json());
    const std::string diffs = run_differences(saved, run, "the checkpoint", "this run");
    std::optional<SavedLayout> moved_from;
    if (!diffs.empty()) {
      const std::string beyond_layout = run_differences(with_layout_of(saved, run), run, "the checkpoint", "this run");
      if (reshard && !beyond_layout.empty())
        fail(where,
             ": --reshard moves the state to another world size, strategy or wrap, and the checkpoint was "
             "saved by a run that differs in more: ",
             beyond_layout);
      if (!reshard)
        fail(where, ": the checkpoint was saved by a different run, so this one cannot continue it exactly: ", diffs,
             beyond_layout.empty() ? " (only the layout differs: --reshard continues it in this run's layout, "
                                     "moving each parameter's state to its new place)"
                                   : "");
      moved_from = saved_layout(manifest, where, dir);
    }
    check_files(dir, manifest.value("files", Json()),
                moved_from ? moved_from->world : run.at("fsdp").at("world").get<int>(), where);
    return TrainingCheckpoint(dir, manifest.at("step").get<int>(), std::move(moved_from));
  } catch (const Json::exception& e) {
    // Only a manifest edited by hand (its checksum recomputed) can have fields of the wrong type.
    fail(where, ": '", (dir / kManifest).string(), "' is malformed: ", json_error_text(e));
  }
}

// ---- resuming ----------------------------------------------------------------------------------------

namespace {

// World rank `rank`'s file of `checkpoint`, checked to be that rank's state after the checkpoint's step.
SafetensorsFile read_rank_file(const TrainingCheckpoint& checkpoint, int rank) {
  SafetensorsFile file = SafetensorsFile::read(checkpoint.dir() / rank_file(rank));
  check(metadata(file, "format") == kRankFormat, file.path(), ": format '", metadata(file, "format"), "'; expected '",
        kRankFormat, "'");
  check(metadata_int(file, "rank") == rank && metadata_int(file, "step") == checkpoint.step(), file.path(),
        ": holds rank ", metadata(file, "rank"), " after step ", metadata(file, "step"), "; the manifest says rank ",
        rank, " after step ", checkpoint.step());
  return file;
}

// Replicated parameters (zero1, zero2): this rank holds only its chunk, the others come from its peers.
void gather_replicas(FullyShardedModel& sharded) {
  FsdpRank& rank = sharded.rank();
  bool replicated = false;
  for (const FsdpUnit* unit : sharded.units()) replicated = replicated || unit->replica.defined();
  if (!replicated || rank.shard_group.world() == 1) return;
  rank.device.wait_stream(Lane::all_gather, Lane::compute);
  for (FsdpUnit* unit : sharded.units())
    rank.shard_group.all_gather(rank.device.stream(Lane::all_gather), unit->master, unit->replica);
  rank.device.wait_stream(Lane::compute, Lane::all_gather);
}

// [Note: moving a shard by parameter]
// A resharding resume fills each of this rank's shards (a unit's master, or one of its optimizer states) slice by
// slice: shard_slices says which elements [param_begin, param_begin + count) of which parameter the shard holds;
// those are elements offset + param_begin ... of the parameter's saved unit's flat buffer, which the saved shard
// boundaries (every shard_numel elements) may cut into pieces from two or more saved ranks' files. The padding
// is 0, as in a shard FSDP materialises. Nothing is summed or converted: the values move bit for bit.
void restore_moved_state(const TrainingCheckpoint& checkpoint, const SavedLayout& saved, FullyShardedModel& sharded,
                         Optimizer& optimizer) {
  FsdpRank& rank = sharded.rank();
  std::map<int, SafetensorsFile> files;  // saved shard s, from world rank s's file (see SavedLayout)
  const auto shard_file = [&](int s) -> const SafetensorsFile& {
    auto it = files.find(s);
    if (it == files.end()) {
      it = files.emplace(s, read_rank_file(checkpoint, s)).first;
      check_holds_shard(it->second, s);
    }
    return it->second;
  };
  rank.device.synchronize();  // the host writes memory that ops issued so far may use
  const FlatParameterTask& flat = *sharded.tasks().flat_parameter;
  // Fills `into`, this rank's shard of `unit`, from the saved tensors `saved_name(saved unit)`.
  const auto fill = [&](const FsdpUnit& unit, const Tensor& into, const auto& saved_name) {
    check(into.numel() == unit.layout.shard_numel(), "--reshard: rank ", rank.world.rank(), "'s shard of unit '",
          unit.name, "' has ", into.numel(), " elements; its layout says ", unit.layout.shard_numel());
    std::vector<float> values(static_cast<std::size_t>(into.numel()), 0.0f);
    for (const ShardSlice& slice : flat.shard_slices(unit.layout, rank.shard_group.rank())) {
      const auto place = saved.params.find(slice.param->name);
      check(place != saved.params.end() && place->second.numel == slice.param->numel(), "--reshard: parameter '",
            slice.param->name, "' of ", slice.param->numel(), " elements is not in the checkpoint's layout as such");
      const SavedLayout::Place& from = place->second;
      for (std::int64_t done = 0; done < slice.count;) {
        const std::int64_t at = from.offset + slice.param_begin + done;  // in the saved unit's flat buffer
        const auto s = static_cast<int>(at / from.shard_numel);
        const std::int64_t within = at - s * from.shard_numel;
        const std::int64_t n = std::min(slice.count - done, from.shard_numel - within);
        const std::span<const std::byte> bytes =
            shard_file(s).expect(saved_name(from.unit), DType::f32, {from.shard_numel});
        std::memcpy(values.data() + slice.shard_offset + done, bytes.data() + within * std::int64_t{sizeof(float)},
                    static_cast<std::size_t>(n) * sizeof(float));
        done += n;
      }
    }
    into.copy_from(values);
  };
  std::map<std::string, const FsdpUnit*, std::less<>> unit_named;
  for (FsdpUnit* unit : sharded.units()) {
    unit_named[unit->name] = unit;
    fill(*unit, unit->master, [](const std::string& u) { return param_tensor(u); });
  }
  for (std::size_t i = 0; i < optimizer.targets().size(); ++i) {
    const OptimTarget& target = optimizer.targets()[i];
    const auto unit = unit_named.find(target.name);
    check(unit != unit_named.end(), "--reshard: the optimizer's target '", target.name,
          "' is not a unit's shard; the state of a sharded optimizer (task 5) moves only as one target per unit, "
          "named for it");
    for (const Optimizer::StateTensor& state : optimizer.state(i))
      fill(*unit->second, state.tensor, [&](const std::string& u) { return state_tensor(u, state.name); });
  }
  optimizer.restore_steps(metadata_int(shard_file(0), "optimizer_steps"));
}

}  // namespace

void restore_rank_state(const TrainingCheckpoint& checkpoint, FullyShardedModel& sharded, Optimizer& optimizer) {
  if (const SavedLayout* saved = checkpoint.moved_from()) {
    restore_moved_state(checkpoint, *saved, sharded, optimizer);
    gather_replicas(sharded);
    return;
  }
  FsdpRank& rank = sharded.rank();
  const SafetensorsFile file = read_rank_file(checkpoint, rank.world.rank());
  rank.device.synchronize();  // the host writes memory that ops issued so far may use
  std::set<std::string> expected;
  const auto load = [&](const std::string& name, const Tensor& into) {
    expected.insert(name);
    const std::span<const std::byte> bytes = file.expect(name, DType::f32, {into.numel()});
    std::vector<float> values(static_cast<std::size_t>(into.numel()));
    std::memcpy(values.data(), bytes.data(), bytes.size());  // the file may not align floats
    into.copy_from(values);
  };
  for (FsdpUnit* unit : sharded.units()) load(param_tensor(unit->name), unit->master);
  for (std::size_t i = 0; i < optimizer.targets().size(); ++i)
    for (const Optimizer::StateTensor& s : optimizer.state(i))
      load(state_tensor(optimizer.targets()[i].name, s.name), s.tensor);
  for (const std::string& name : file.names())
    check(expected.contains(name), file.path(), " has tensor '", name, "', which this run's state does not have");
  optimizer.restore_steps(metadata_int(file, "optimizer_steps"));
  gather_replicas(sharded);
}

// ---- saving ------------------------------------------------------------------------------------------

void save_training_checkpoint(const fs::path& requested, const Json& run, const Json& model_config, int step,
                              FullyShardedModel& sharded, Optimizer& optimizer, const std::function<void()>& written) {
  Communicator& world = sharded.rank().world;
  const int me = world.rank();
  const fs::path dir = clean(requested);
  const fs::path staging = sibling(dir, kStaging);
  std::error_code ec;
  if (me == 0) {
    fs::remove_all(staging, ec);
    fs::create_directories(dir.parent_path(), ec);
    fs::create_directory(staging, ec);
    check(!ec, "checkpoint: cannot create '", staging.string(), "': ", ec.message());
  }
  world.barrier();  // the staging folder exists
  write_rank_state(staging / rank_file(me), step, sharded, optimizer);
  if (written) written();
  world.barrier();  // every rank's file is on disk
  if (me == 0) {
    write_full_model(staging, sharded, model_config);
    Json files = Json::object();
    for (const std::string& name : data_files(world.world())) {
      flush_to_disk(staging / name, false);  // config.json is renamed into place unflushed
      const FileDigest digest = digest_file(staging / name);
      files[name] = {{"bytes", digest.bytes}, {"crc32", crc32_hex(digest.crc32)}};
    }
    // Each unit's layout, for a resume at another one (--reshard): see Resharding in the header.
    Json layouts = Json::array();
    for (const FsdpUnit* unit : sharded.units())
      layouts.push_back({{"unit", unit->name},
                         {"shard_numel", unit->layout.shard_numel()},
                         {"params", layout_entries(unit->layout)}});
    write_manifest(staging, {{"format", std::string(kFormat)},
                             {"format_version", kTrainingCheckpointVersion},
                             {"step", step},
                             {"run", run},
                             {"layouts", layouts},
                             {"files", files}});
    flush_to_disk(staging, true);
    swap_in(staging, dir);
  }
  world.barrier();  // the checkpoint is in place
}

std::chrono::milliseconds checkpoint_wait_timeout(Model& model, const OptimizerSpec& spec,
                                                  std::chrono::milliseconds usual) {
  double elements = 0;
  for (const Parameter* p : model.parameters()) elements += static_cast<double>(p->numel());
  const double bytes = elements * sizeof(float) * (2 + optimizer_state_count(spec));  // rank files + the model
  const auto needed = std::chrono::milliseconds(static_cast<std::int64_t>(2 * bytes / 20e6 * 1000));
  return std::max(usual, needed);
}

void discard_checkpoint_staging(const fs::path& dir) noexcept {
  try {
    std::error_code ignored;
    fs::remove_all(sibling(clean(dir), kStaging), ignored);
  } catch (...) {  // a path clean() refuses has no staging folder
  }
}

}  // namespace fsdplab
