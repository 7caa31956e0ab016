// `fsdplab report`'s own pieces (app/report/): the Markdown tables every section writes, and the line charts
// and figure rendering of report_figures.hpp, headless (the figures themselves are drawn offscreen by
// tests/smoke/report_quick.sh, in the default preset only: Mesa's llvmpipe is not built for the sanitizers).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "app/dashboard/headless_imgui.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_figures.hpp"
#include "app/shell_quote.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::app {
namespace {

TEST(ReportMarkdown, TableAlignsColumnsAndEscapesCells) {
  MarkdownTable table({"Operation", "Time (ms)"});
  table.add_row({"All-gather", "0.0563"});
  table.add_row({"a|b", "12.5"});
  EXPECT_EQ(table.str(),
            "| Operation  | Time (ms) |\n"
            "| ---------- | --------: |\n"
            "| All-gather |    0.0563 |\n"
            "| a\\|b       |      12.5 |\n");
  EXPECT_EQ(table.rows(), 2u);
}

TEST(ReportMarkdown, RowOfTheWrongWidthIsAnError) {
  MarkdownTable table({"a", "b"});
  EXPECT_THROW(table.add_row({"only one"}), Error);
  EXPECT_THROW(MarkdownTable({"a", "b"}, {MarkdownTable::Align::left}), Error);
}

TEST(ReportMarkdown, CommandsAndShellWords) {
  EXPECT_EQ(command_block({"fsdplab bench --what memory", "fsdplab run"}),
            "```bash\nfsdplab bench --what memory\nfsdplab run\n```\n");
  EXPECT_EQ(shell_quote("--preset"), "--preset");
  EXPECT_EQ(shell_quote("my dir"), "'my dir'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(format("%.3f / %.3f", 1.0, 0.5), "1.000 / 0.500");
}

TEST(ReportFigures, LineChartDrawsItsSeriesAndSurvivesBadPoints) {
  HeadlessImGui imgui(800, 600);
  LineChart chart;
  chart.log_x = true;
  chart.x_label = "size";
  chart.y_label = "GB/s";
  chart.series.push_back(
      {"all-gather", {4096, 65536, 1 << 20}, {0.1, 1.2, 9.0}, IM_COL32(255, 0, 0, 255), true, false});
  // Points a log axis cannot show, and ones that are not numbers: left out, not drawn at infinity.
  chart.series.push_back({"bad", {0, -1, 1e6}, {1, 2, std::nan("")}, IM_COL32(0, 255, 0, 255), false, true});
  // A window is measured in its first frame and drawn from its second.
  for (int frame = 0; frame < 2; ++frame) {
    imgui.new_frame();
    ImGui::SetNextWindowSize(ImVec2(700, 500));
    ImGui::Begin("chart");
    draw_line_chart(chart, ImVec2(600, 400));
    ImGui::End();
    imgui.render();
  }
  const ImDrawData& data = *ImGui::GetDrawData();
  ASSERT_GT(data.CmdListsCount, 0);
  int vertices = 0;
  for (int i = 0; i < data.CmdListsCount; ++i) vertices += data.CmdLists[i]->VtxBuffer.Size;
  EXPECT_GT(vertices, 500);  // grid, ticks, labels, three markers, two segments, the legend

  LineChart empty;
  imgui.new_frame();
  ImGui::Begin("empty");
  draw_line_chart(empty, ImVec2(300, 200));  // "no data", and no division by an empty range
  ImGui::End();
  imgui.render();
}

// libglvnd reads __EGL_VENDOR_LIBRARY_FILENAMES once, at this process's first EGL call, and no other test here
// calls EGL: told to load a vendor file that is not there, EGL has no driver and no figure can be drawn.
TEST(ReportFigures, WithoutAnOffscreenContextEveryFigureSaysWhyItWasNotDrawn) {
  setenv("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent/egl_vendor.json", 1);
  bool drawn = false;
  const std::vector<FigureResult> results = render_figures(
      {{"a.png", "first", [&] { drawn = true; }}, {"b.png", "second", [&] { drawn = true; }}},
      std::filesystem::temp_directory_path());
  unsetenv("__EGL_VENDOR_LIBRARY_FILENAMES");
  ASSERT_EQ(results.size(), 2u);
  for (const FigureResult& r : results) {
    EXPECT_FALSE(r.drawn);
    EXPECT_NE(r.why.find("no offscreen OpenGL 3.3 core context"), std::string::npos) << r.why;
    EXPECT_NE(r.why.find("Install Mesa's EGL"), std::string::npos) << r.why;
  }
  EXPECT_EQ(results[1].file, "b.png");
  EXPECT_FALSE(drawn);
}

}  // namespace
}  // namespace fsdplab::app
