// budget_line_json.hpp — a BudgetLine as JSON ({"what", "graded", "reference", "unit"}), spelt once for the two
// places that write it: the outcome a check's process sends the grader (check_process.cpp) and the grade a
// course's gradebook reads (grade_report.cpp).
#pragma once
#include <nlohmann/json.hpp>

#include "grader/grade_check.hpp"

namespace fsdplab::grading {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BudgetLine, what, graded, reference, unit)

}  // namespace fsdplab::grading
