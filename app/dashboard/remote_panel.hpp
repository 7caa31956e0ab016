// remote_panel.hpp — the left panel of a dashboard fed by other processes (`fsdplab gui --listen`), in
// place of a live session's run settings: where it listens and how to stream a run there, each stream
// (peer, run, ranks, state), and why streams were dropped or lost.
#pragma once
#include "app/dashboard/remote_session.hpp"

namespace fsdplab::app {

void draw_remote_panel(const RemoteSession& remote);

}  // namespace fsdplab::app
