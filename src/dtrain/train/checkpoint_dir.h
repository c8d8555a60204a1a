// The checkpoints folder of a run: epoch-N.ckpt files and `latest`, a one-line file naming the
// newest complete checkpoint.
//
// Order of a save: write epoch-N.ckpt atomically, then rewrite `latest` atomically, then delete
// the oldest files beyond the `keep` newest. A crash at any point leaves `latest` naming a
// complete, verified file, so `dtrain train --resume` always has something good to start from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/train/checkpoint.h"

namespace dtrain::train {

class CheckpointDir {
 public:
  // keep = 0 keeps every checkpoint. The folder is created on the first save.
  CheckpointDir(std::string folder, std::int64_t keep);

  // Saves `checkpoint` as epoch-<epoch>.ckpt and points `latest` at it; returns its path.
  std::string save(const Checkpoint& checkpoint, std::int64_t epoch);

  // The path `latest` names; CheckpointError when the folder has no `latest` or it names a file
  // that is missing or not a checkpoint name.
  std::string latest_path() const;

  // Paths of the epoch-N.ckpt files present, oldest first.
  std::vector<std::string> list() const;

  const std::string& folder() const { return folder_; }

 private:
  std::string folder_;
  std::int64_t keep_;
};

}  // namespace dtrain::train
