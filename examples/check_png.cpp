// Checks a PNG that an example wrote: it decodes (Halide's image I/O header, libpng), has the
// expected size and is not blank, i.e. holds at least kMinDistinct distinct pixel values (a
// heatmap has hundreds; an image of one colour, or a failed render, has one or two).
//
//   check_png <file.png> <width> <height>
//   check_png <file.png>                   the size from <file.png>.size ("<width> <height>",
//                                          as attention_map writes it)
//
// Prints what it found; exit status 0 if every check passes, 1 otherwise.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "HalideBuffer.h"
#include "halide_image_io.h"

namespace {

constexpr size_t kMinDistinct = 16;

// Distinct pixel values (all channels together) of an image [x, y] or [x, y, channel].
template <typename T>
size_t distinct_pixels(const Halide::Runtime::Buffer<T>& image) {
  const int channels = image.dimensions() == 3 ? image.channels() : 1;
  std::set<uint64_t> seen;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      uint64_t pixel = 0;  // at most 4 channels of at most 16 bits
      for (int c = 0; c < channels; ++c) {
        pixel = (pixel << 16) | (image.dimensions() == 3 ? image(x, y, c) : image(x, y));
      }
      seen.insert(pixel);
    }
  }
  return seen.size();
}

bool parse_size(const char* text, int* value) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  *value = int(v);
  return end != text && *end == '\0' && v > 0 && v < (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: %s <file.png> [<width> <height>]\n", argv[0]);
    return 1;
  }
  const std::string path = argv[1];
  int width = 0, height = 0;
  if (argc == 4) {
    if (!parse_size(argv[2], &width) || !parse_size(argv[3], &height)) {
      std::fprintf(stderr, "width and height must be positive integers\n");
      return 1;
    }
  } else {
    FILE* size_file = std::fopen((path + ".size").c_str(), "r");
    const bool read = size_file != nullptr &&
                      std::fscanf(size_file, "%d %d", &width, &height) == 2 && width > 0 &&
                      height > 0;
    if (size_file != nullptr) std::fclose(size_file);
    if (!read) {
      std::fprintf(stderr, "%s.size: cannot read \"<width> <height>\" from it\n", path.c_str());
      return 1;
    }
  }

  // load() (not load_image(), which aborts) reports a missing or undecodable file as false.
  Halide::Runtime::Buffer<> image;
  if (path.size() < 4 || path.compare(path.size() - 4, 4, ".png") != 0 ||
      !Halide::Tools::load(path, &image)) {
    std::fprintf(stderr, "%s: not a readable .png file\n", path.c_str());
    return 1;
  }
  size_t distinct = 0;
  if (image.type() == halide_type_of<uint8_t>()) {
    distinct = distinct_pixels(image.as<uint8_t>());
  } else if (image.type() == halide_type_of<uint16_t>()) {
    distinct = distinct_pixels(image.as<uint16_t>());
  }
  const bool size_ok = image.width() == width && image.height() == height;
  const bool not_blank = distinct >= kMinDistinct;
  std::printf("%s: %d x %d (expected %d x %d), %zu distinct pixel values (need %zu)\n",
              path.c_str(), image.width(), image.height(), width, height, distinct, kMinDistinct);
  std::printf("%s\n", size_ok && not_blank ? "PASS" : "FAIL");
  return size_ok && not_blank ? 0 : 1;
}
