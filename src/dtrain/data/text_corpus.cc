#include "dtrain/data/text_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw DataError(fmt::format("cannot read text file {}; check data.path and its permissions",
                                file.string()));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw DataError(fmt::format("cannot read text file {}", file.string()));
  return bytes.str();
}

// `count` windows of block + 1 bytes of split [begin, end) of `bytes`, at offsets drawn from
// stream `stream` of `seed`.
Dataset windows(const std::string& bytes, std::int64_t begin, std::int64_t end, std::int64_t block,
                std::int64_t count, std::uint64_t seed, std::uint64_t stream) {
  Dataset out;
  out.name = "text";
  out.num_classes = 256;
  out.labels_per_sample = block;
  out.images = tensor::Tensor::empty({count, block});
  out.labels.resize(static_cast<std::size_t>(count * block));
  Rng rng(seed, stream);
  const auto offsets = static_cast<std::uint64_t>(end - begin - block);  // block + 1 bytes fit
  const auto* text = reinterpret_cast<const unsigned char*>(bytes.data());
  float* input = out.images.data();
  for (std::int64_t w = 0; w < count; ++w) {
    const std::int64_t offset = begin + static_cast<std::int64_t>(rng.below(offsets));
    for (std::int64_t t = 0; t < block; ++t) {
      input[w * block + t] = static_cast<float>(text[offset + t]);
      out.labels[static_cast<std::size_t>(w * block + t)] =
          static_cast<std::int32_t>(text[offset + t + 1]);
    }
  }
  return out;
}

}  // namespace

std::string read_text_corpus(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw DataError(fmt::format(
        "text corpus {} does not exist; set data.path to a text file or a folder of text files "
        "(Debian's fortunes: apt-get install fortunes, /usr/share/games/fortunes)",
        path));
  }
  std::string bytes;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files, plain;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (!entry.is_regular_file()) continue;
      files.push_back(entry.path());
      if (!entry.path().has_extension()) plain.push_back(entry.path());
    }
    if (ec) throw DataError(fmt::format("cannot list text folder {}: {}", path, ec.message()));
    std::vector<fs::path>& chosen = plain.empty() ? files : plain;
    std::sort(chosen.begin(), chosen.end());
    for (const fs::path& file : chosen) bytes += read_file(file);
  } else {
    bytes = read_file(path);
  }
  if (bytes.empty()) {
    throw DataError(fmt::format("text corpus {} is empty (no bytes in {}); set data.path to text",
                                path, fs::is_directory(path, ec) ? "its files" : "the file"));
  }
  return bytes;
}

DenseSplits make_text_windows(const std::string& bytes, const TextSpec& spec) {
  const auto n = static_cast<std::int64_t>(bytes.size());
  const auto train_end = static_cast<std::int64_t>(static_cast<double>(n) * (1.0 - spec.holdout));
  const std::int64_t need = spec.block + 1;
  if (train_end < need || n - train_end < need) {
    throw DataError(fmt::format(
        "text corpus {} has {} bytes: a training split of {} and a held-out split of {} bytes "
        "(data.text_holdout = {}), but a window needs data.block + 1 = {} bytes in each; use a "
        "longer text or a smaller data.block",
        spec.path, n, train_end, n - train_end, spec.holdout, need));
  }
  const std::int64_t train_windows = spec.train_windows > 0
                                         ? spec.train_windows
                                         : std::max<std::int64_t>(1, train_end / spec.block);
  DenseSplits out;
  out.train = windows(bytes, 0, train_end, spec.block, train_windows, spec.seed, 0);
  out.test = windows(bytes, train_end, n, spec.block, spec.test_windows, spec.seed, 1);
  return out;
}

}  // namespace dtrain::data
