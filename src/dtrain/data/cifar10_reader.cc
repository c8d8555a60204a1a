#include "dtrain/data/cifar10_reader.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/data/input_file.h"

namespace dtrain::data {
namespace {

constexpr std::int64_t kChannels = 3;
constexpr std::int64_t kSide = 32;
constexpr std::int64_t kPlane = kSide * kSide;
constexpr std::int64_t kRecordBytes = 1 + kChannels * kPlane;  // 3073
constexpr std::int64_t kClasses = 10;
constexpr int kTrainBatches = 5;

constexpr const char* kCifarHint =
    "download the CIFAR-10 binary version (cifar-10-binary.tar.gz from "
    "https://www.cs.toronto.edu/~kriz/cifar.html) and unpack it there";

// The folder that holds the batch files: dir itself, or dir/cifar-10-batches-bin as unpacked.
std::filesystem::path batch_folder(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    throw DataError(fmt::format("data directory {} for data set 'cifar10' does not exist; {}", dir,
                                kCifarHint));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw DataError(fmt::format(
        "data path {} for data set 'cifar10' is not a directory; give the directory that holds "
        "data_batch_1.bin ... test_batch.bin",
        dir));
  }
  const std::filesystem::path nested = std::filesystem::path(dir) / "cifar-10-batches-bin";
  if (!std::filesystem::exists(std::filesystem::path(dir) / "test_batch.bin", ec) &&
      std::filesystem::is_directory(nested, ec)) {
    return nested;
  }
  return dir;
}

// name or name.gz inside folder.
std::string find_batch_file(const std::filesystem::path& folder, const std::string& name) {
  std::error_code ec;
  for (const char* suffix : {"", ".gz"}) {
    const std::filesystem::path candidate = folder / (name + suffix);
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate.string();
  }
  throw DataError(fmt::format("CIFAR-10 file {}[.gz] does not exist; {}", (folder / name).string(),
                              kCifarHint));
}

}  // namespace

Dataset load_cifar10(const std::string& dir, Split split) {
  return load_cifar10(dir, split, standard_normalization("cifar10"));
}

Dataset load_cifar10(const std::string& dir, Split split, const Normalization& norm) {
  check_normalization(norm, kChannels, "data set 'cifar10'");
  const std::filesystem::path folder = batch_folder(dir);
  std::vector<std::string> names;
  if (split == Split::kTrain) {
    for (int b = 1; b <= kTrainBatches; ++b) names.push_back(fmt::format("data_batch_{}.bin", b));
  } else {
    names.push_back("test_batch.bin");
  }
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back(find_batch_file(folder, name));

  // Read and check every file before the float tensor (4x the bytes) is allocated.
  std::vector<std::vector<std::uint8_t>> files;
  std::int64_t count = 0;
  for (const std::string& path : paths) {
    InputFile file(path, kCifarHint);
    if (!file.compressed() && file.file_size() % kRecordBytes != 0) {
      throw DataError(fmt::format(
          "CIFAR-10 file {} has {} bytes, not a multiple of the {}-byte record (1 label + 3072 "
          "pixels): {} whole records and {} bytes over; the file is truncated or not the binary "
          "version",
          path, file.file_size(), kRecordBytes, file.file_size() / kRecordBytes,
          file.file_size() % kRecordBytes));
    }
    std::vector<std::uint8_t> bytes = file.read_rest();
    const auto size = static_cast<std::int64_t>(bytes.size());
    if (size % kRecordBytes != 0) {
      throw DataError(fmt::format(
          "CIFAR-10 file {} decompresses to {} bytes, not a multiple of the {}-byte record (1 "
          "label + 3072 pixels): {} whole records and {} bytes over; the file is truncated or not "
          "the binary version",
          path, size, kRecordBytes, size / kRecordBytes, size % kRecordBytes));
    }
    if (size == 0) {
      throw DataError(fmt::format("CIFAR-10 file {} is empty; download it again", path));
    }
    const std::int64_t records = size / kRecordBytes;
    for (std::int64_t r = 0; r < records; ++r) {
      const std::uint8_t label = bytes[static_cast<std::size_t>(r * kRecordBytes)];
      if (label >= kClasses) {
        throw DataError(fmt::format(
            "CIFAR-10 file {}: label {} of record {} (byte offset {}) is outside [0, {}); the file "
            "is corrupt or not CIFAR-10 (CIFAR-100 has 2 label bytes per record)",
            path, label, r, r * kRecordBytes, kClasses));
      }
    }
    count += records;
    files.push_back(std::move(bytes));
  }

  Dataset data;
  data.name = "cifar10";
  data.num_classes = kClasses;
  data.images = tensor::Tensor::empty({count, kChannels, kSide, kSide});
  data.labels.reserve(static_cast<std::size_t>(count));
  std::int64_t offset = 0;
  for (const std::vector<std::uint8_t>& bytes : files) {
    const std::int64_t records = static_cast<std::int64_t>(bytes.size()) / kRecordBytes;
    for (std::int64_t r = 0; r < records; ++r) {
      data.labels.push_back(bytes[static_cast<std::size_t>(r * kRecordBytes)]);
    }
    decode_pixels(bytes.data() + 1, kRecordBytes, records, kChannels, kPlane, norm,
                  data.images.data() + offset * kChannels * kPlane);
    offset += records;
  }
  return data;
}

}  // namespace dtrain::data
