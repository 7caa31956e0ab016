// byte_text.hpp — how fsdplab writes a number of bytes wherever a person reads it: the FSDP events' texts, the
// dashboard's timeline tooltips and memory panel.
#pragma once
#include <cstdint>
#include <string>

namespace fsdplab {

// Three significant digits, decimal units: "512 B", "1.50 kB", "12.5 kB", "123 MB", "4.00 GB", "1.20 TB".
std::string format_bytes(std::int64_t bytes);

}  // namespace fsdplab
