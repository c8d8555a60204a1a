#include "dtrain/data/libsvm_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/memory_info.h"
#include "dtrain/data/input_file.h"

namespace dtrain::data {
namespace {

constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();
// A linear model over d features holds d float weights (parallel/hogwild.h): an index this large
// or more is announced, and refused with its line when those weights alone exceed the memory
// available (a typo such as 2000000000 would otherwise build a 7.5 GiB model without a word).
constexpr std::int64_t kLargeIndex = 50'000'000;
constexpr std::int64_t kWeightBytes = 4;
// Longest piece of a bad token quoted in a message.
constexpr std::size_t kQuoteLength = 32;

std::string quoted(std::string_view token) {
  if (token.size() <= kQuoteLength) return fmt::format("'{}'", token);
  return fmt::format("'{}...'", token.substr(0, kQuoteLength));
}

bool is_blank(char ch) { return ch == ' ' || ch == '\t'; }

// A whole token as a finite number; std::from_chars takes no leading '+', libsvm files have them.
bool parse_number(std::string_view token, float& out) {
  if (token.size() > 1 && token[0] == '+' && token[1] != '-' && token[1] != '+') {
    token.remove_prefix(1);
  }
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, out);
  return ec == std::errc() && ptr == end && std::isfinite(out);
}

class Parser {
 public:
  Parser(const std::string& source, std::int64_t min_features) : source_(source) {
    data_.name = fmt::format("libsvm file {}", source);
    min_features_ = min_features;
  }

  void line(std::string_view text, std::int64_t number) {
    number_ = number;
    if (const auto hash = text.find('#'); hash != std::string_view::npos) {
      text = text.substr(0, hash);
    }
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    std::size_t pos = 0;
    const std::string_view label_token = next_token(text, pos);
    if (label_token.empty()) return;  // blank or comment-only
    float label = 0.0f;
    if (label_token.find(':') != std::string_view::npos) {
      fail(fmt::format("the line starts with {} but must start with a label", quoted(label_token)));
    }
    if (!parse_number(label_token, label)) {
      fail(fmt::format("label {} is not a finite number", quoted(label_token)));
    }
    std::int64_t previous = 0;
    for (std::string_view token = next_token(text, pos); !token.empty();
         token = next_token(text, pos)) {
      const auto colon = token.find(':');
      if (colon == std::string_view::npos) {
        fail(fmt::format("{} is not index:value", quoted(token)));
      }
      const std::string_view index_text = token.substr(0, colon);
      const std::string_view value_text = token.substr(colon + 1);
      std::int64_t index = 0;
      const char* index_end = index_text.data() + index_text.size();
      const auto [ptr, ec] = std::from_chars(index_text.data(), index_end, index);
      const bool digits_only = !index_text.empty() && index_text[0] != '-';
      if (ec == std::errc::result_out_of_range ||
          (ec == std::errc() && ptr == index_end && digits_only && index > kMaxIndex)) {
        fail(fmt::format("index {} is larger than {}", quoted(index_text), kMaxIndex));
      }
      if (ec != std::errc() || ptr != index_end || !digits_only || index < 1) {
        fail(fmt::format("index {} in {} is not a positive integer (indices are 1-based)",
                         quoted(index_text), quoted(token)));
      }
      if (index <= previous) {
        fail(fmt::format("index {} after {}: indices must increase", index, previous));
      }
      float value = 0.0f;
      if (!parse_number(value_text, value)) {
        fail(fmt::format("value {} of index {} is not a finite number", quoted(value_text), index));
      }
      previous = index;
      if (index > max_index_) {
        max_index_ = index;
        max_index_line_ = number;
        if (index >= kLargeIndex) check_fits(index);
      }
      data_.columns.push_back(static_cast<std::int32_t>(index - 1));
      data_.values.push_back(value);
    }
    data_.labels.push_back(label);
    data_.row_offsets.push_back(static_cast<std::int64_t>(data_.columns.size()));
  }

  SparseDataset finish() {
    if (data_.size() == 0) {
      throw DataError(fmt::format(
          "libsvm file {} holds no sample (only blank or comment lines); check the path", source_));
    }
    data_.num_features = std::max(max_index_, min_features_);
    if (max_index_ >= kLargeIndex) {
      log::warn(
          "libsvm file {}, line {}: index {} gives the data set {} features; a linear model over "
          "them holds {} weights ({}); renumber the features densely if that index is a mistake",
          source_, max_index_line_, max_index_, data_.num_features, data_.num_features,
          format_bytes(data_.num_features * kWeightBytes));
    }
    return std::move(data_);
  }

 private:
  static std::string_view next_token(std::string_view text, std::size_t& pos) {
    while (pos < text.size() && is_blank(text[pos])) ++pos;
    const std::size_t begin = pos;
    while (pos < text.size() && !is_blank(text[pos])) ++pos;
    return text.substr(begin, pos - begin);
  }

  // Refuses `index` when a model's weights over that many features cannot fit in memory.
  void check_fits(std::int64_t index) {
    if (!available_) available_ = available_memory();
    const std::int64_t bytes = index * kWeightBytes;
    if (!available_->known || bytes <= available_->bytes) return;
    fail(fmt::format(
        "index {} gives the data set {} features, and a linear model's weights over them alone "
        "need {}, more than the {} available ({}); renumber the features densely (or hash them "
        "into fewer columns), or use a machine with more memory",
        index, index, format_bytes(bytes), format_bytes(available_->bytes), available_->source));
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(fmt::format("libsvm file {}, line {}: {}", source_, number_, what));
  }

  const std::string& source_;
  SparseDataset data_;
  std::int64_t min_features_ = 0;
  std::int64_t max_index_ = 0;
  std::int64_t max_index_line_ = 0;
  std::int64_t number_ = 0;
  std::optional<AvailableMemory> available_;  // read at the first large index
};

}  // namespace

SparseDataset parse_libsvm(std::string_view text, const std::string& source,
                           std::int64_t min_features) {
  Parser parser(source, min_features);
  std::int64_t number = 0;
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t newline = text.find('\n', begin);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
    ++number;
    if (text.substr(begin, end - begin).find('\0') != std::string_view::npos) {
      throw DataError(
          fmt::format("libsvm file {}, line {}: a NUL byte; this is a binary file, not libsvm text",
                      source, number));
    }
    parser.line(text.substr(begin, end - begin), number);
    begin = end + 1;
  }
  return parser.finish();
}

SparseDataset read_libsvm(const std::string& path, std::int64_t min_features) {
  InputFile file(path);
  const std::vector<std::uint8_t> bytes = file.read_rest();
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return parse_libsvm(text, path, min_features);
}

}  // namespace dtrain::data
