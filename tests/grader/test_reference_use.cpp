// A lab whose class hands on the reference's work is found from its source (grader/reference_use.hpp): the name of
// the function that returns its task's reference, in its code, comments and strings aside.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "grader/reference_use.hpp"

namespace fsdplab::grading {
namespace {

TEST(ReferenceUse, AClassThatCallsTheReferencesMethodsIsNamedWithItsLine) {
  const std::string lab = R"lab(#include "engine/fsdp/meta_init.hpp"
namespace fsdplab {
namespace {
class Mine final : public MetaInitTask {
  void init_shard(std::span<const ShardSlice> s, const Tensor& shard, std::uint64_t seed) const override {
    fsdplab::reference_meta_init().init_shard(s, shard, seed);
  }
};
}  // namespace
const MetaInitTask& student_meta_init() { static const Mine m; return m; }
}  // namespace fsdplab
)lab";
  EXPECT_EQ(names_its_reference(1, lab), "line 6 names reference_meta_init()");
  // Every task's: reference_tasks() holds them all.
  EXPECT_EQ(names_its_reference(3, "int a;\nauto& f = *reference_tasks().forward;\n"),
            "line 2 names reference_tasks()");
}

TEST(ReferenceUse, CommentsStringsAndOtherNamesAreNotACall) {
  const std::string lab =
      "// reference_forward() would do it all\n"
      "/* not reference_forward()\n   either */ int x;\n"
      "const char* s = \"reference_forward() \\\" reference_forward\";\n"
      "const char* r = R\"(reference_forward())\";\n"
      "char c = '\"'; int my_reference_forward = 0, reference_forward_calls = 1;\n"
      "auto& b = reference_backward();  // another task's: not this one's work\n";
  EXPECT_EQ(names_its_reference(3, lab), std::nullopt);
  EXPECT_EQ(names_its_reference(4, lab), "line 7 names reference_backward()");
}

TEST(ReferenceUse, CodeOnlyKeepsTheLinesAndColumnsOfTheCode) {
  const std::string source = "int a; // one\n/* two\nthree */ int b = '\\''; const char* c = \"x\\\"y\";\nint d;";
  const std::string code = code_only(source);
  ASSERT_EQ(code.size(), source.size());
  EXPECT_EQ(std::count(code.begin(), code.end(), '\n'), std::count(source.begin(), source.end(), '\n'));
  EXPECT_EQ(code.substr(0, 7), "int a; ");
  EXPECT_EQ(code.find("one"), std::string::npos);
  EXPECT_EQ(code.find("three"), std::string::npos);
  EXPECT_EQ(code.find('x'), std::string::npos);
  EXPECT_EQ(code.find("int b ="), source.find("int b ="));
  EXPECT_EQ(code.find("int d;"), source.find("int d;"));
}

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(FSDPLAB_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The skeletons a student starts from name no reference; each reference's own source names its function (it
// defines it), so the search reads real files as they are.
TEST(ReferenceUse, NoSkeletonNamesItsReferenceAndEachReferenceDoes) {
  for (int task = 1; task <= kTaskCount; ++task) {
    const TaskInfo& info = task_info(task);
    EXPECT_EQ(names_its_reference(task, read_source(std::string(info.lab) + "/student.cpp")), std::nullopt) << task;
    const std::string reference_file =
        "engine/fsdp/" + std::string(info.reference.substr(std::string_view("reference_").size())) + "_reference.cpp";
    EXPECT_NE(names_its_reference(task, read_source(reference_file)), std::nullopt) << reference_file;
  }
}

}  // namespace
}  // namespace fsdplab::grading
