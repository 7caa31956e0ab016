#include "grader/diagnostic_text.hpp"

#include <cstdio>
#include <iomanip>
#include <sstream>

namespace fsdplab::grading {

std::string number(double value) {
  std::ostringstream s;
  s.precision(6);
  s << value;
  return s.str();
}

std::string us(SimTime ns) { return number(ns_to_us(ns)) + " us"; }

std::string ms(SimTime ns) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << ns_to_ms(ns) << " ms";
  return s.str();
}

std::string megabytes(std::int64_t bytes) {
  std::ostringstream s;
  s.precision(4);
  s << static_cast<double>(bytes) / 1e6 << " MB";
  return s.str();
}

std::string percent(double value) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << value << " %";
  return s.str();
}

FiguresApart figures_apart(double graded, double reference) {
  const auto text = [](double v, int digits) {
    char number[48];
    std::snprintf(number, sizeof number, "%.*f", digits, v);
    return std::string(number);
  };
  int digits = 2;
  while (digits < 6 && graded != reference && text(graded, digits) == text(reference, digits)) ++digits;
  return {text(graded, digits), text(reference, digits)};
}

}  // namespace fsdplab::grading
