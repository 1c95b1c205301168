// The attention weights of a multi-head self-attention layer over a short sentence, drawn as a PNG
// heatmap: one panel per head and one for the average over the heads. In each panel row i is a
// query word and column j a key word; the cell's colour is the weight of j in i's softmax (white 0,
// dark blue 1, the same scale in every panel). The words get deterministic random embeddings (the
// same word, the same vector) plus sinusoidal positions, and the layer's weights are random too:
// the map shows what untrained heads do, not what a trained model learned.
//
// multi_head_attention returns the weights itself (MhaOptions::attention_weights): [B, H, Sq, Sk]
// per head in one call, [B, Sq, Sk] averaged over the heads in another. Both are checked against
// naive double loops before anything is drawn.
//
//   attention_map <out.png> [word ...]     (default sentence: "the cat sat on the mat because it
//                                           was tired"; at most 24 words)
//
// Writes out.png (through Halide's image I/O header, libpng) and out.png.size holding
// "<width> <height>", and prints the size; `check_png out.png` reads that file to verify the image.
// Exit status 1 if a call fails, the weights disagree with the reference or a file cannot be
// written.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "HalideBuffer.h"
#include "attention/attention.h"
#include "halide_image_io.h"

namespace {

constexpr int64_t kModel = 32, kHeads = 4, kHeadDim = kModel / kHeads;
constexpr size_t kMaxWords = 24;

// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
double positional_encoding(int64_t pos, int64_t feature, int64_t width) {
  const double angle = pos / std::pow(10000.0, double(feature - feature % 2) / width);
  return feature % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

// x [S, kModel]: each word's embedding, seeded by the word's FNV-1a hash, plus its position.
std::vector<float> embed(const std::vector<std::string>& words) {
  std::vector<float> x;
  for (size_t pos = 0; pos < words.size(); ++pos) {
    uint32_t hash = 2166136261u;
    for (char c : words[pos]) hash = (hash ^ uint8_t(c)) * 16777619u;
    std::mt19937 rng(hash);
    std::normal_distribution<float> normal;
    for (int64_t e = 0; e < kModel; ++e) {
      x.push_back(float(normal(rng) + positional_encoding(int64_t(pos), e, kModel)));
    }
  }
  return x;
}

// Softmax over the keys of each head's scaled scores, [H, S, S], from x [S, kModel] and W_q, W_k
// (the first 2·kModel rows of in_proj_weight), all in double.
std::vector<double> reference_weights(const std::vector<float>& x,
                                      const std::vector<float>& in_proj_weight, int64_t s) {
  std::vector<double> qk(s * 2 * kModel);  // row i: [q_i | k_i]
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t o = 0; o < 2 * kModel; ++o) {
      double sum = 0.0;
      for (int64_t e = 0; e < kModel; ++e) {
        sum += double(x[i * kModel + e]) * in_proj_weight[o * kModel + e];
      }
      qk[i * 2 * kModel + o] = sum;
    }
  }
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  std::vector<double> weights(kHeads * s * s);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t i = 0; i < s; ++i) {
      double* row = &weights[(h * s + i) * s];
      double row_max = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < s; ++j) {
        double score = 0.0;
        for (int64_t d = 0; d < kHeadDim; ++d) {
          score += qk[i * 2 * kModel + h * kHeadDim + d] *
                   qk[j * 2 * kModel + kModel + h * kHeadDim + d];
        }
        row[j] = scale * score;
        row_max = std::max(row_max, row[j]);
      }
      for (int64_t j = 0; j < s; ++j) sum += (row[j] = std::exp(row[j] - row_max));
      for (int64_t j = 0; j < s; ++j) row[j] /= sum;
    }
  }
  return weights;
}

// ---- Drawing: a 5 × 7 bitmap font and the panels, into an RGB Halide buffer (x, y, channel).

using Image = Halide::Runtime::Buffer<uint8_t>;
using Rgb = std::array<uint8_t, 3>;

constexpr int kCell = 24;  // image pixels per matrix cell
constexpr int kDot = 2;    // image pixels per font pixel (each way), so the labels are legible
constexpr int kGlyphWidth = 5, kGlyphHeight = 7;
constexpr int kAdvance = (kGlyphWidth + 1) * kDot;  // one font pixel between letters
constexpr int kTextHeight = kGlyphHeight * kDot;
constexpr int kMargin = 12, kPanelGap = 28, kLabelGap = 6;
constexpr Rgb kWhite = {255, 255, 255}, kBlack = {0, 0, 0}, kDarkBlue = {8, 48, 107};

// Rows top to bottom, bit 4 the leftmost pixel. Letters and digits; anything else draws as a space.
struct Glyph {
  char c;
  uint8_t rows[kGlyphHeight];
};
constexpr Glyph kFont[] = {
    {'a', {0b00000, 0b00000, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111}},
    {'b', {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110}},
    {'c', {0b00000, 0b00000, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110}},
    {'d', {0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111}},
    {'e', {0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110}},
    {'f', {0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000}},
    {'g', {0b00000, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110}},
    {'h', {0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001}},
    {'i', {0b00100, 0b00000, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'j', {0b00010, 0b00000, 0b00110, 0b00010, 0b00010, 0b10010, 0b01100}},
    {'k', {0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010}},
    {'l', {0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'m', {0b00000, 0b00000, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001}},
    {'n', {0b00000, 0b00000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001}},
    {'o', {0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'p', {0b00000, 0b00000, 0b11110, 0b10001, 0b11110, 0b10000, 0b10000}},
    {'q', {0b00000, 0b00000, 0b01101, 0b10011, 0b01111, 0b00001, 0b00001}},
    {'r', {0b00000, 0b00000, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000}},
    {'s', {0b00000, 0b00000, 0b01110, 0b10000, 0b01110, 0b00001, 0b11110}},
    {'t', {0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110}},
    {'u', {0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101}},
    {'v', {0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100}},
    {'w', {0b00000, 0b00000, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010}},
    {'x', {0b00000, 0b00000, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001}},
    {'y', {0b00000, 0b00000, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110}},
    {'z', {0b00000, 0b00000, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'0', {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110}},
    {'1', {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'2', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'3', {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110}},
    {'4', {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010}},
    {'5', {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110}},
    {'6', {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110}},
    {'7', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000}},
    {'8', {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110}},
    {'9', {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100}},
};

void fill(Image& image, int x0, int y0, int width, int height, const Rgb& color) {
  for (int y = y0; y < y0 + height; ++y) {
    for (int x = x0; x < x0 + width; ++x) {
      for (int c = 0; c < 3; ++c) image(x, y, c) = color[c];
    }
  }
}

int text_width(const std::string& text) { return int(text.size()) * kAdvance - kDot; }

// Draws `text` with its top-left corner at (x, y); `upward` turns it 90° counter-clockwise to read
// bottom to top, starting at (x, y) as its bottom-left corner (the column labels).
void draw_text(Image& image, const std::string& text, int x, int y, bool upward) {
  for (size_t n = 0; n < text.size(); ++n) {
    const Glyph* glyph = std::find_if(std::begin(kFont), std::end(kFont),
                                      [&](const Glyph& g) { return g.c == text[n]; });
    if (glyph == std::end(kFont)) continue;
    for (int gy = 0; gy < kGlyphHeight; ++gy) {
      for (int gx = 0; gx < kGlyphWidth; ++gx) {
        if (!((glyph->rows[gy] >> (kGlyphWidth - 1 - gx)) & 1)) continue;
        const int along = int(n) * kAdvance + gx * kDot;  // along the reading direction
        if (upward) {
          fill(image, x + gy * kDot, y - along - kDot, kDot, kDot, kBlack);
        } else {
          fill(image, x + along, y + gy * kDot, kDot, kDot, kBlack);
        }
      }
    }
  }
}

// One panel per map ([S, S] weights, rows = queries), side by side, each with its title, the words
// down its left side and (turned) along its top.
Image draw_maps(const std::vector<std::string>& words, const std::vector<std::string>& titles,
                const std::vector<const float*>& maps) {
  const int s = int(words.size());
  int label = 0;
  for (const std::string& w : words) label = std::max(label, text_width(w));
  const int panel_width = label + kLabelGap + s * kCell;
  const int grid_top = kMargin + kTextHeight + kLabelGap + label + kLabelGap;
  const int panels = int(maps.size());
  Image image(2 * kMargin + panels * panel_width + (panels - 1) * kPanelGap,
              grid_top + s * kCell + kMargin, 3);
  fill(image, 0, 0, image.width(), image.height(), kWhite);
  for (int p = 0; p < panels; ++p) {
    const int grid_left = kMargin + p * (panel_width + kPanelGap) + label + kLabelGap;
    draw_text(image, titles[p], grid_left, kMargin, false);
    for (int i = 0; i < s; ++i) {
      const int offset = (kCell - kTextHeight) / 2;  // centre the text on its row or column
      draw_text(image, words[i], grid_left - kLabelGap - text_width(words[i]),
                grid_top + i * kCell + offset, false);
      draw_text(image, words[i], grid_left + i * kCell + offset, grid_top - kLabelGap, true);
      for (int j = 0; j < s; ++j) {
        const float t = std::clamp(maps[p][i * s + j], 0.0f, 1.0f);
        Rgb color;
        for (int c = 0; c < 3; ++c) {
          color[c] = uint8_t(std::lround(kWhite[c] + t * (kDarkBlue[c] - kWhite[c])));
        }
        // One pixel less than the cell each way: white lines between the cells.
        fill(image, grid_left + j * kCell, grid_top + i * kCell, kCell - 1, kCell - 1, color);
      }
    }
  }
  return image;
}

double max_error(const float* a, const std::vector<double>& b) {
  double error = 0.0;
  for (size_t n = 0; n < b.size(); ++n) {
    const double e = std::abs(a[n] - b[n]);
    error = std::isnan(e) ? INFINITY : std::max(error, e);
  }
  return error;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out.png> [word ...]\n", argv[0]);
    return 1;
  }
  const std::string path = argv[1];
  std::vector<std::string> words;
  for (int a = 2; a < argc; ++a) words.push_back(argv[a]);
  if (words.empty()) {
    words = {"the", "cat", "sat", "on", "the", "mat", "because", "it", "was", "tired"};
  }
  if (words.size() > kMaxWords) {
    std::fprintf(stderr, "at most %zu words\n", kMaxWords);
    return 1;
  }
  for (std::string& w : words) {
    for (char& c : w) c = char(std::tolower(uint8_t(c)));
  }
  const int64_t s = int64_t(words.size());

  // Larger than nn.Linear's initialization (±1/sqrt(kModel) = ±0.18): untrained heads with small
  // weights spread their attention almost evenly, and the map would be a flat wash.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::vector<float> in_proj_weight(3 * kModel * kModel), out_proj_weight(kModel * kModel);
  for (float& v : in_proj_weight) v = uniform(rng);
  for (float& v : out_proj_weight) v = uniform(rng);
  std::vector<float> x = embed(words), out(s * kModel);

  using attention::TensorView;
  attention::MhaWeights weights;  // no biases: the views stay empty
  weights.in_proj_weight = TensorView::contiguous(in_proj_weight.data(), {3 * kModel, kModel});
  weights.out_proj_weight = TensorView::contiguous(out_proj_weight.data(), {kModel, kModel});
  const TensorView xv = TensorView::contiguous(x.data(), {1, s, kModel});
  const TensorView ov = TensorView::contiguous(out.data(), {1, s, kModel});

  // Per head, then averaged over the heads (PyTorch's average_attn_weights): the weights view's
  // rank says which.
  std::vector<float> per_head(kHeads * s * s, NAN), average(s * s, NAN);
  auto attend = [&](const TensorView& attention_weights) {
    attention::MhaOptions options;
    options.num_heads = kHeads;
    options.attention_weights = attention_weights;
    const attention::Status status = attention::multi_head_attention(xv, xv, weights, ov, options);
    if (!status.ok()) std::fprintf(stderr, "multi_head_attention: %s\n", status.message().c_str());
    return status.ok();
  };
  if (!attend(TensorView::contiguous(per_head.data(), {1, kHeads, s, s})) ||
      !attend(TensorView::contiguous(average.data(), {1, s, s}))) {
    return 1;
  }

  const std::vector<double> expected = reference_weights(x, in_proj_weight, s);
  std::vector<double> expected_average(s * s, 0.0);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t n = 0; n < s * s; ++n) expected_average[n] += expected[h * s * s + n] / kHeads;
  }
  const double head_error = max_error(per_head.data(), expected);
  const double average_error = max_error(average.data(), expected_average);
  std::printf("attention weights vs naive double: per head %.2e, averaged %.2e\n", head_error,
              average_error);
  if (!(head_error <= 1e-4 && average_error <= 1e-4)) {  // weights lie in [0, 1]
    std::printf("FAIL\n");
    return 1;
  }

  // The word each word attends to most, averaged over the heads.
  for (int64_t i = 0; i < s; ++i) {
    const float* row = &average[i * s];
    const int64_t top = std::max_element(row, row + s) - row;
    std::printf("  %-10s -> %-10s %.2f\n", words[i].c_str(), words[top].c_str(), row[top]);
  }

  std::vector<std::string> titles;
  std::vector<const float*> maps;
  for (int64_t h = 0; h < kHeads; ++h) {
    titles.push_back("head " + std::to_string(h + 1));
    maps.push_back(&per_head[h * s * s]);
  }
  titles.push_back("average");
  maps.push_back(average.data());
  Image image = draw_maps(words, titles, maps);
  if (!Halide::Tools::save(image, path)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  FILE* size_file = std::fopen((path + ".size").c_str(), "w");
  const bool size_written =
      size_file != nullptr && std::fprintf(size_file, "%d %d\n", image.width(), image.height()) > 0;
  if (size_file == nullptr || std::fclose(size_file) != 0 || !size_written) {
    std::fprintf(stderr, "cannot write %s.size\n", path.c_str());
    return 1;
  }
  std::printf("wrote %s (%d x %d) and %s.size\n", path.c_str(), image.width(), image.height(),
              path.c_str());
  return 0;
}
