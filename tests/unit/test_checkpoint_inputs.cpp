// The first file a --load-init folder (config.json) and a --resume folder (manifest.json) is read for: what is
// not a regular file is refused by its kind, naming the file, before a byte is read. A directory in place of
// config.json once gave "basic_filebuf::underflow error", a device as the manifest was read to its end (/dev/zero
// has none), and a FIFO hung the run (the FIFOs are in tests/data/bad_inputs/corpus.txt, under its time limit).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/nn/checkpoint.hpp"
#include "engine/nn/toy_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/training_checkpoint.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;

class CheckpointInputs : public testing::TempDirTest {};

TEST_F(CheckpointInputs, AConfigThatIsNotARegularFileIsRefusedByItsKind) {
  ToyModel model;
  fs::create_directories(path("dir_config/config.json"));
  std::string e = error_of([&] { CheckpointFile::open(path("dir_config"), model, {}); });
  EXPECT_TRUE(contains(e, "'" + (path("dir_config") / "config.json").string() +
                              "': it is a directory; expected a regular file (written by --save-init or --save-final)"))
      << e;
  fs::create_directories(path("device_config"));
  fs::create_symlink("/dev/null", path("device_config/config.json"));
  e = error_of([&] { CheckpointFile::open(path("device_config"), model, {}); });
  EXPECT_TRUE(contains(e, "it is a character device")) << e;
  fs::create_directories(path("no_config"));
  e = error_of([&] { CheckpointFile::open(path("no_config"), model, {}); });
  EXPECT_TRUE(contains(e, "holds no config.json; expected a folder written by --save-init or --save-final")) << e;
}

TEST_F(CheckpointInputs, AManifestThatIsNotARegularFileIsRefusedByItsKind) {
  fs::create_directories(path("dir_manifest/manifest.json"));
  std::string e = error_of([&] { TrainingCheckpoint::open(path("dir_manifest"), {}); });
  EXPECT_TRUE(contains(e, "'" + (path("dir_manifest") / "manifest.json").string() +
                              "': it is a directory; expected a regular file (written by --checkpoint)"))
      << e;
  fs::create_directories(path("device_manifest"));
  fs::create_symlink("/dev/null", path("device_manifest/manifest.json"));
  e = error_of([&] { TrainingCheckpoint::open(path("device_manifest"), {}); });
  EXPECT_TRUE(contains(e, "it is a character device")) << e;
}

}  // namespace
}  // namespace fsdplab
