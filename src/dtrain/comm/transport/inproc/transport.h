// Rank `rank` of an InprocWorld: the Transport that collectives see when ranks are threads.
#pragma once

#include <memory>

#include "dtrain/comm/transport/inproc/world.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocWorld> world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  std::string_view name() const override { return "inproc"; }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override;
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override;

 private:
  void check_peer(int peer, const char* what) const;

  std::shared_ptr<InprocWorld> world_;
  int rank_;
};

}  // namespace dtrain::comm
