#include "app/report/report_context.hpp"

#include <utility>

namespace fsdplab::app {

std::string ReportContext::figure(Figure f) {
  figures.push_back(std::move(f));
  return "@@FIGURE:" + std::to_string(figures.size() - 1) + "@@\n";
}

}  // namespace fsdplab::app
