// diagnostic_text.hpp — how the checks write numbers into their diagnostics, one way for all of them:
// "4.1552", "13.146 us", "1.003 ms", "0.2142 MB", "31.19 %".
#pragma once
#include <cstdint>
#include <string>

#include "engine/runtime/sim_time.hpp"

namespace fsdplab::grading {

std::string number(double value);       // six significant digits
std::string us(SimTime ns);             // a virtual time or span in microseconds, six significant digits
std::string ms(SimTime ns);             // in milliseconds, three decimals
std::string megabytes(std::int64_t bytes);  // decimal MB, four significant digits
std::string percent(double value);          // two decimals, as the budget line prints overlap
// A figure and the reference's beside it, as a budget prints them: to the hundredth, or with as many more decimals (up
// to 6) as it takes to tell the two apart ("1.094" and "1.090", where "1.09" and "1.09" would read as no excess).
struct FiguresApart {
  std::string graded, reference;
};
FiguresApart figures_apart(double graded, double reference);

}  // namespace fsdplab::grading
