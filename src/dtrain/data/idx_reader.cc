#include "dtrain/data/idx_reader.h"

#include <array>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "dtrain/base/error.h"
#include "dtrain/data/input_file.h"

namespace dtrain::data {
namespace {

constexpr std::uint8_t kIdxTypeU8 = 0x08;
// MNIST and Fashion-MNIST both have ten classes.
constexpr std::int64_t kIdxClasses = 10;

std::uint32_t big_endian_u32(const std::uint8_t* bytes) {
  return (static_cast<std::uint32_t>(bytes[0]) << 24) |
         (static_cast<std::uint32_t>(bytes[1]) << 16) |
         (static_cast<std::uint32_t>(bytes[2]) << 8) | static_cast<std::uint32_t>(bytes[3]);
}

// The name of an IDX type byte, or empty when it is none of the six the format defines.
std::string_view idx_type_name(std::uint8_t type) {
  switch (type) {
    case 0x08: return "uint8";
    case 0x09: return "int8";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return {};
  }
}

std::string expected_magic(int expected_dims) {
  if (expected_dims > 0) {
    return fmt::format("0x{:08X}", 0x800u + static_cast<unsigned>(expected_dims));
  }
  return "0x000008nn (uint8, nn dimensions)";
}

[[noreturn]] void throw_wrong_magic(const std::string& path, std::uint32_t magic,
                                    int expected_dims) {
  throw DataError(fmt::format(
      "IDX file {}: wrong magic number 0x{:08X}, expected {} (images are 0x00000803, labels "
      "0x00000801); check that the path names the right file",
      path, magic, expected_magic(expected_dims)));
}

std::string dims_str(const std::vector<std::int64_t>& dims) { return tensor::shape_str(dims); }

// The IDX file for (prefix, kind) in dir, raw or gzip, in either spelling found in the wild.
std::string find_idx_file(const std::string& dir, std::string_view prefix, std::string_view kind,
                          std::string_view idx) {
  const std::array<std::string, 2> stems = {fmt::format("{}-{}-{}-ubyte", prefix, kind, idx),
                                            fmt::format("{}-{}.{}-ubyte", prefix, kind, idx)};
  std::error_code ec;
  for (const std::string& stem : stems) {
    for (const char* suffix : {"", ".gz"}) {
      const std::filesystem::path candidate = std::filesystem::path(dir) / (stem + suffix);
      if (std::filesystem::is_regular_file(candidate, ec)) return candidate.string();
    }
  }
  throw DataError(fmt::format("no {} file in data directory {}: looked for {}[.gz] and {}[.gz]; {}",
                              kind, dir, stems[0], stems[1], kFashionMnistHint));
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_dims) {
  InputFile file(path, kFashionMnistHint);
  std::array<std::uint8_t, 4> magic_bytes{};
  const std::uint64_t magic_got = file.read(magic_bytes.data(), magic_bytes.size());
  if (magic_got < magic_bytes.size()) {
    throw DataError(fmt::format(
        "IDX file {} is truncated: expected a 4-byte magic number, got {} bytes; the file is "
        "incomplete or not an IDX file",
        path, magic_got));
  }
  const std::uint32_t magic = big_endian_u32(magic_bytes.data());
  const std::uint8_t type = magic_bytes[2];
  const int ndims = magic_bytes[3];
  if (magic_bytes[0] != 0 || magic_bytes[1] != 0) throw_wrong_magic(path, magic, expected_dims);
  if (type != kIdxTypeU8) {
    const std::string_view type_name = idx_type_name(type);
    if (type_name.empty()) throw_wrong_magic(path, magic, expected_dims);
    throw DataError(fmt::format(
        "IDX file {}: type byte 0x{:02X} ({}) in magic number 0x{:08X}, but dtrain reads only "
        "uint8 IDX files (type 0x08); convert the data to uint8",
        path, type, type_name, magic));
  }
  if (ndims == 0 || (expected_dims > 0 && ndims != expected_dims)) {
    throw_wrong_magic(path, magic, expected_dims);
  }

  IdxArray array;
  std::vector<std::uint8_t> dim_bytes(static_cast<std::size_t>(ndims) * 4);
  const std::uint64_t header_bytes = 4 + dim_bytes.size();
  const std::uint64_t dims_got = file.read(dim_bytes.data(), dim_bytes.size());
  if (dims_got < dim_bytes.size()) {
    throw DataError(fmt::format(
        "IDX file {} is truncated: expected a {}-byte header ({} dimensions), got {} bytes; the "
        "file is incomplete: download it again",
        path, header_bytes, ndims, 4 + dims_got));
  }
  // The claimed size saturates instead of overflowing; anything above what the file can hold is
  // rejected below before a byte is allocated.
  std::uint64_t claimed = 1;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t dim = big_endian_u32(dim_bytes.data() + 4 * d);
    array.dims.push_back(static_cast<std::int64_t>(dim));
    if (dim != 0 && claimed > UINT64_MAX / dim) {
      claimed = UINT64_MAX;
    } else {
      claimed *= dim;
    }
  }
  // A dimension of 0 makes the product 0 even after an earlier saturation.
  for (std::int64_t dim : array.dims) {
    if (dim == 0) claimed = 0;
  }

  const std::uint64_t can_hold = file.max_remaining();
  if (claimed > can_hold) {
    throw DataError(fmt::format(
        "IDX file {} is truncated: expected {} bytes of data after the {}-byte header (dims {}), "
        "got {}{}; the file is incomplete: download it again",
        path, claimed, header_bytes, dims_str(array.dims), file.compressed() ? "at most " : "",
        can_hold));
  }
  const std::uint64_t got = file.read_up_to(array.values, claimed);
  if (got < claimed) {
    throw DataError(fmt::format(
        "IDX file {} is truncated: expected {} bytes of data after the {}-byte header (dims {}), "
        "got {}; the file is incomplete: download it again",
        path, claimed, header_bytes, dims_str(array.dims), got));
  }
  if (!file.at_end()) {
    throw DataError(fmt::format(
        "IDX file {} is longer than its header says: bytes follow the {} bytes of data that dims "
        "{} declare; check that it is one uncorrupted IDX file",
        path, claimed, dims_str(array.dims)));
  }
  return array;
}

Dataset load_idx_dataset(const std::string& dir, Split split, const std::string& name) {
  return load_idx_dataset(dir, split, name, standard_normalization(name));
}

Dataset load_idx_dataset(const std::string& dir, Split split, const std::string& name,
                         const Normalization& norm) {
  check_normalization(norm, 1, fmt::format("data set '{}'", name));
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    throw DataError(fmt::format("data directory {} for data set '{}' does not exist; {}", dir, name,
                                kFashionMnistHint));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw DataError(fmt::format(
        "data path {} for data set '{}' is not a directory; give the directory that holds the "
        "IDX files",
        dir, name));
  }
  const std::string_view prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_idx_file(dir, prefix, "images", "idx3");
  const std::string labels_path = find_idx_file(dir, prefix, "labels", "idx1");
  const IdxArray images = read_idx(images_path, 3);
  const IdxArray labels = read_idx(labels_path, 1);

  const std::int64_t count = images.dims[0];
  if (labels.dims[0] != count) {
    throw DataError(fmt::format(
        "IDX files disagree: {} holds {} images but {} holds {} labels; use the images and labels "
        "of the same split",
        images_path, count, labels_path, labels.dims[0]));
  }
  if (count == 0) {
    throw DataError(fmt::format("IDX file {} holds no images (dims {}); the data set is empty",
                                images_path, dims_str(images.dims)));
  }
  const std::int64_t height = images.dims[1];
  const std::int64_t width = images.dims[2];
  if (height == 0 || width == 0) {
    throw DataError(
        fmt::format("IDX file {} has empty images (dims {})", images_path, dims_str(images.dims)));
  }

  Dataset data;
  data.name = name;
  data.num_classes = kIdxClasses;
  data.labels.resize(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < data.labels.size(); ++i) {
    const std::uint8_t label = labels.values[i];
    if (label >= kIdxClasses) {
      throw DataError(fmt::format(
          "IDX file {}: label {} at index {} is outside [0, {}); the labels file is corrupt or "
          "not of a 10-class data set",
          labels_path, label, i, kIdxClasses));
    }
    data.labels[i] = label;
  }
  data.images = tensor::Tensor::empty({count, 1, height, width});
  decode_pixels(images.values.data(), height * width, count, 1, height * width, norm,
                data.images.data());
  return data;
}

}  // namespace dtrain::data
