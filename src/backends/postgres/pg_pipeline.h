// Many prepared statements in one round trip and one transaction, through
// libpq's pipeline mode (libpq 14 and later).
//
// The statements are sent back to back and followed by one Sync: the
// server runs them in order, as one implicit transaction, and commits it at
// the Sync (one WAL flush for all of them). If one fails, the server rolls
// the whole transaction back and skips the rest: nothing of the batch
// stands, and the caller decides what to run again.
//
// Thread-safety: the connection is used by one thread at a time (the
// caller holds its mutex).
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_PG_PIPELINE_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_PG_PIPELINE_H_

#include <libpq-fe.h>

#include <span>
#include <string_view>
#include <vector>

#include "backends/postgres/pg_util.h"
#include "backends/postgres/pg_values.h"
#include "dlock/status.h"

namespace dlock::postgres {

// One execution of a prepared statement.
struct PreparedCall {
  const char* statement = nullptr;
  Params params;
};

// The Sync's answer came: the transaction ended.
struct PipelineOutcome {
  // A statement failed (its error, through FromPg, is `failure`): the
  // transaction was rolled back. Otherwise it committed.
  bool failed = false;
  Status failure;
  // When none failed: each statement's result, in order.
  std::vector<PgResultHandle> results;
};

// Runs `calls` on `conn` (idle, non-blocking) before `deadline`.
// kUnavailable when the outcome is unknown — the connection broke, or the
// deadline passed, before the Sync's answer — and the connection must then
// be dropped; `what` and `where` name the batch and the server in it.
Result<PipelineOutcome> RunPipeline(PGconn* conn, std::span<const PreparedCall> calls,
                                    SteadyTime deadline, std::string_view what,
                                    std::string_view where);

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_PG_PIPELINE_H_
