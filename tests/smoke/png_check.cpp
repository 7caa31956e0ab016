// png_check — is a screenshot a drawn dashboard, not a blank or a single-colour frame?
//
//   png_check FILE.png WIDTH HEIGHT
// Passes (exit 0) when the PNG has the expected size, at least 16 distinct colours, and at least 10 %
// of its pixels differ from its most common colour (the background); prints what it measured either way.
#include <cstdio>
#include <cstdlib>
#include <map>

#include <stb_image.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: png_check FILE.png WIDTH HEIGHT\n");
    return 2;
  }
  int width = 0, height = 0, channels = 0;
  unsigned char* pixels = stbi_load(argv[1], &width, &height, &channels, 3);
  if (!pixels) {
    std::fprintf(stderr, "png_check: cannot read '%s': %s\n", argv[1], stbi_failure_reason());
    return 1;
  }
  std::map<unsigned, long> colours;
  const long count = static_cast<long>(width) * height;
  for (long i = 0; i < count; ++i) {
    const unsigned char* p = pixels + 3 * i;
    ++colours[(unsigned{p[0]} << 16) | (unsigned{p[1]} << 8) | p[2]];
  }
  stbi_image_free(pixels);
  long background = 0;
  for (const auto& [colour, n] : colours) background = n > background ? n : background;
  const double drawn = count ? 100.0 * static_cast<double>(count - background) / static_cast<double>(count) : 0;
  std::printf("png_check: %s is %dx%d, %zu colours, %.1f %% of pixels not background\n", argv[1], width, height,
              colours.size(), drawn);
  const bool ok = width == std::atoi(argv[2]) && height == std::atoi(argv[3]) && colours.size() >= 16 && drawn >= 10;
  if (!ok) std::fprintf(stderr, "png_check: expected %sx%s with >= 16 colours and >= 10 %% drawn\n", argv[2], argv[3]);
  return ok ? 0 : 1;
}
