// Errors of the communication layer: a peer that failed, a deadline that passed, ranks that
// disagree about a collective. Messages name this rank, the peer, the operation and the tag.
#pragma once

#include "dtrain/base/error.h"

namespace dtrain::comm {

// A point-to-point or collective operation that could not complete: a peer aborted or exited,
// a message did not fit its receive buffer, or ranks called a collective with different arguments.
class CommError : public Error {
 public:
  using Error::Error;
};

// A blocking wait that reached its deadline (CommOptions::timeout, DTRAIN_COMM_TIMEOUT_MS).
class CommTimeoutError : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace dtrain::comm
