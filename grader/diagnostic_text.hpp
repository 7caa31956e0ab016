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

}  // namespace fsdplab::grading
