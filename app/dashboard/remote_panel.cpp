#include "app/dashboard/remote_panel.hpp"

#include <imgui.h>

#include <algorithm>
#include <string>

#include "app/dashboard/palette.hpp"
#include "app/dashboard/printable_text.hpp"

namespace fsdplab::app {
namespace {

ImVec4 state_color(RemoteStream::State s) {
  switch (s) {
    case RemoteStream::State::streaming: return ImVec4(0.4f, 0.85f, 0.45f, 1);
    case RemoteStream::State::finished: return ImVec4(0.6f, 0.6f, 0.6f, 1);
    case RemoteStream::State::failed:
    case RemoteStream::State::lost:
    case RemoteStream::State::dropped: return ImGui::ColorConvertU32ToFloat4(kFailedColor);
    case RemoteStream::State::connected: break;
  }
  return ImVec4(0.9f, 0.8f, 0.3f, 1);
}

}  // namespace

void draw_remote_panel(const RemoteSession& remote) {
  const DashboardListener& listener = remote.listener();
  ImGui::Text("Listening on %s", listener.address().c_str());
  if (listener.loopback()) {
    ImGui::TextDisabled("loopback only: runs on this machine");
  } else {
    ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
    text_wrapped_at_spaces("not a loopback address: anyone who can reach it can send this dashboard data");
    ImGui::PopStyleColor();
  }
  // Wrapped at spaces only: ImGui's wrap would break the address after one of its dots.
  text_wrapped_at_spaces("Stream a run here: fsdplab run --model gpt2 --world 2 --dashboard " + listener.address());
  ImGui::Separator();

  const auto& streams = remote.streams();
  const auto open = std::count_if(streams.begin(), streams.end(), [](const auto& entry) {
    return entry.second.state == RemoteStream::State::connected || entry.second.state == RemoteStream::State::streaming;
  });
  ImGui::Text("Streams: %d open", static_cast<int>(open));
  if (streams.empty()) ImGui::TextDisabled("none yet");
  for (const auto& [connection, s] : streams) {
    ImGui::TextColored(state_color(s.state), "#%d %-9s", connection, std::string(remote_state_name(s.state)).c_str());
    ImGui::SameLine();
    ImGui::TextUnformatted(s.peer.c_str());
    if (s.source >= 0) {
      const std::string ranks = s.ranks == 1 ? "rank " + std::to_string(s.first_rank)
                                             : "ranks " + std::to_string(s.first_rank) + ".." +
                                                   std::to_string(s.first_rank + s.ranks - 1);
      ImGui::Indent();
      text_wrapped_at_spaces(remote.store().source(s.source).label + ": " + ranks + ", " + std::to_string(s.messages) +
                             " messages");
      ImGui::Unindent();
    }
  }

  if (remote.problem_count() > 0) {
    ImGui::Separator();
    ImGui::Text("Failed, dropped or lost: %zu", remote.problem_count());
    if (remote.problem_count() > remote.problems().size())
      ImGui::TextDisabled("(the last %zu shown)", remote.problems().size());
    ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
    for (const std::string& p : remote.problems()) text_wrapped_at_spaces(printable(p));  // from anyone
    ImGui::PopStyleColor();
  }
}

}  // namespace fsdplab::app
