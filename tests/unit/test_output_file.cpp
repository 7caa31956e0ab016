// Writing a file a user named (output_file.hpp): through a symbolic link, into a node that is not a
// regular file, and the checks made before a run. The nodes and links are the test's own, in a scratch
// folder: a regression must never be able to replace a node of the machine.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "engine/runtime/error.hpp"
#include "engine/runtime/output_file.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

using testing::contains;
using testing::error_of;

class OutputFile : public testing::TempDirTest {
 protected:
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(path("locked"), fs::perms::owner_all, ignored);  // so the folder can be removed
    TempDirTest::TearDown();
  }
  static void write(const fs::path& p, const std::string& text) {
    write_output_file(p, "--losses", [&](std::ostream& out) { out << text; });
  }
};

TEST_F(OutputFile, RegularFileIsReplacedWholeAndNoTemporaryStays) {
  write(path("a.csv"), "old\n");
  write(path("a.csv"), "new\n");
  EXPECT_EQ(slurp(path("a.csv")), "new\n");
  EXPECT_FALSE(fs::exists(path("a.csv.tmp")));
  // A writer that fails leaves the old contents and no temporary.
  EXPECT_THROW(write_output_file(path("a.csv"), "--losses", [](std::ostream& out) {
                 out << "half";
                 fail("stopped midway");
               }),
               Error);
  EXPECT_EQ(slurp(path("a.csv")), "new\n");
  EXPECT_FALSE(fs::exists(path("a.csv.tmp")));
}

TEST_F(OutputFile, SymbolicLinkStaysALinkAndItsTargetGetsTheContents) {
  fs::create_directories(path("elsewhere"));
  write(path("elsewhere/target.csv"), "old\n");
  fs::create_symlink("elsewhere/target.csv", path("link.csv"));  // relative, as `ln -s` makes them
  fs::create_symlink(path("link.csv"), path("link2.csv"));       // a chain of two
  write(path("link2.csv"), "new\n");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("link.csv"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("link2.csv"))));
  EXPECT_EQ(slurp(path("elsewhere/target.csv")), "new\n");
  EXPECT_FALSE(fs::exists(path("link2.csv.tmp")));
  EXPECT_FALSE(fs::exists(path("elsewhere/target.csv.tmp")));

  // A link to nothing yet: the file is made where it points.
  fs::create_symlink("elsewhere/new.csv", path("dangling.csv"));
  write(path("dangling.csv"), "made\n");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path("dangling.csv"))));
  EXPECT_EQ(slurp(path("elsewhere/new.csv")), "made\n");

  fs::create_symlink("loop_b", path("loop_a"));
  fs::create_symlink("loop_a", path("loop_b"));
  EXPECT_TRUE(contains(error_of([&] { write(path("loop_a"), "x"); }), "symbolic links in a row"));
}

TEST_F(OutputFile, NodeThatIsNotAFileIsWrittenInPlace) {
  // A FIFO stands for /dev/null, /dev/stdout or a terminal: renaming over it would replace the node.
  const fs::path fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink(fifo, path("pipe_link"));
  for (const fs::path& target : {fifo, path("pipe_link")}) {
    SCOPED_TRACE(target.string());
    std::string received;
    std::thread reader([&] { received = slurp(fifo); });
    write(target, "step,loss\n0,1.5\n");
    reader.join();
    EXPECT_EQ(received, "step,loss\n0,1.5\n");
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
    EXPECT_FALSE(fs::exists(path("pipe.tmp")));
  }
  const OutputTarget target = resolve_output(path("pipe_link"), "--trace");
  EXPECT_TRUE(target.in_place);
  EXPECT_EQ(target.path, fifo);
  EXPECT_FALSE(resolve_output(path("new.json"), "--trace").in_place);
  // /dev/stdout leads through /proc/self/fd: written in place, whatever stdout is.
  if (fs::exists("/dev/stdout")) {
    EXPECT_TRUE(resolve_output("/dev/stdout", "--losses").in_place);
  }
}

TEST_F(OutputFile, FolderIsRefused) {
  fs::create_directories(path("folder"));
  EXPECT_TRUE(contains(error_of([&] { write(path("folder"), "x"); }), "--losses '" + path("folder").string() +
                                                                        "' is a folder; expected a file"));
  EXPECT_TRUE(fs::is_directory(path("folder")));
}

TEST_F(OutputFile, ChecksBeforeARunNameTheOptionAndCreateNothing) {
  write(path("plain"), "a file\n");
  // The parent is a file.
  EXPECT_TRUE(contains(error_of([&] { check_output_file(path("plain/losses.csv"), "--losses"); }), "is not a folder"));
  EXPECT_TRUE(contains(error_of([&] { check_output_folder(path("plain/final"), "--save-final"); }),
                       "--save-final '" + path("plain/final").string() + "'"));
  EXPECT_TRUE(contains(error_of([&] { check_output_folder(path("plain"), "--trace-dir"); }), "is not a folder"));
  // A file's folder must exist (the writers create none); a folder output's may be created.
  EXPECT_TRUE(contains(error_of([&] { check_output_file(path("missing/t.json"), "--trace"); }), "does not exist"));
  EXPECT_NO_THROW(check_output_folder(path("missing/deeper/final"), "--save-final"));
  EXPECT_FALSE(fs::exists(path("missing")));
  EXPECT_NO_THROW(check_output_file(path("new.csv"), "--losses"));
  EXPECT_FALSE(fs::exists(path("new.csv")));
  // No permission (root has it anyway).
  if (::geteuid() != 0) {
    fs::create_directories(path("locked"));
    fs::permissions(path("locked"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_TRUE(contains(error_of([&] { check_output_file(path("locked/l.csv"), "--losses"); }), "cannot write into"));
    EXPECT_TRUE(contains(error_of([&] { check_output_folder(path("locked/final"), "--save-final"); }),
                         "cannot write into"));
  }
}

TEST_F(OutputFile, PathIsWithinFollowsLinks) {
  fs::create_directories(path("ck"));
  fs::create_symlink(path("ck"), path("ck_link"));
  EXPECT_TRUE(path_is_within(path("ck/manifest.json"), path("ck")));
  EXPECT_TRUE(path_is_within(path("ck_link/manifest.json"), path("ck")));
  EXPECT_TRUE(path_is_within(path("ck"), path("ck_link/")));
  EXPECT_FALSE(path_is_within(path("ck2/manifest.json"), path("ck")));
  EXPECT_FALSE(path_is_within(path("losses.csv"), path("ck")));
}

// What a run reads and writes, checked apart before it starts (check_paths_apart): an output named as an input
// destroyed it with exit status 0, and two outputs named alike overwrote each other.
TEST_F(OutputFile, AnOutputThatIsAnInputOrAnotherOutputIsRefusedNamingBoth) {
  write(path("tok.bin"), "tokens");
  fs::create_hard_link(path("tok.bin"), path("hard.bin"));
  fs::create_directories(path("init"));
  const auto error = [](std::initializer_list<PathUse> uses) {
    return error_of([&] { check_paths_apart(std::span<const PathUse>(uses.begin(), uses.size())); });
  };
  const std::string tok = path("tok.bin").string();
  EXPECT_TRUE(contains(error({{"--data", path("tok.bin"), false}, {"--losses", path("tok.bin"), true}}),
                       "--losses '" + tok + "' is the same file as --data '" + tok + "', which the run reads"));
  // The same file by another name: a hard link, a path through "..".
  EXPECT_TRUE(contains(error({{"--data", path("tok.bin"), false}, {"--trace", path("hard.bin"), true}}),
                       "--trace '" + path("hard.bin").string() + "' is the same file as --data"));
  EXPECT_TRUE(contains(error({{"--presets", path("tok.bin"), false}, {"--trace", path("init/../tok.bin"), true}}),
                       "is the same file as --presets"));
  // Two outputs, neither there yet.
  EXPECT_TRUE(contains(error({{"--losses", path("x.csv"), true}, {"--trace", path("x.csv"), true}}),
                       "--losses '" + path("x.csv").string() + "' is the same file as --trace '" +
                           path("x.csv").string() + "', another output of the run: one would overwrite the other"));
  EXPECT_TRUE(contains(error({{"--save-init", path("same"), true, true}, {"--save-final", path("same"), true, true}}),
                       "is the same folder as --save-final"));
  // A file in another's folder, whichever comes first.
  EXPECT_TRUE(
      contains(error({{"--losses", path("m/model.safetensors"), true}, {"--save-final", path("m"), true, true}}),
               "--losses '" + path("m/model.safetensors").string() + "' lies in --save-final '" + path("m").string() +
                   "', a folder the run writes; expected a path outside it"));
  EXPECT_TRUE(contains(error({{"--trace-dir", path("tdx"), true, true}, {"--trace", path("tdx/rank0.json"), true}}),
                       "--trace '" + path("tdx/rank0.json").string() + "' lies in --trace-dir"));
  EXPECT_TRUE(contains(error({{"--load-init", path("init"), false, true}, {"--losses", path("init/l.csv"), true}}),
                       "lies in --load-init '" + path("init").string() + "', a folder the run reads"));
  EXPECT_TRUE(contains(error({{"--data", path("init/tok.bin"), false}, {"--checkpoint", path("init"), true, true}}),
                       "--data '" + path("init/tok.bin").string() + "' lies in --checkpoint"));
  // Apart, inputs alike, options not given, and a device written in place twice: all fine.
  const PathUse fine[] = {{"--data", path("tok.bin"), false},
                          {"--presets", path("tok.bin"), false},
                          {"--losses", path("l.csv"), true},
                          {"--trace", path("t.json"), true},
                          {"--save-final", path("final"), true, true},
                          {"--save-init", "", true, true},
                          {"--resume", "", false}};
  EXPECT_NO_THROW(check_paths_apart(fine));
  const PathUse discarded[] = {{"--losses", "/dev/null", true}, {"--trace", "/dev/null", true}};
  EXPECT_NO_THROW(check_paths_apart(discarded));
}

}  // namespace
}  // namespace fsdplab
