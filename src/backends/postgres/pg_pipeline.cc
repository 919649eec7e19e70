#include "backends/postgres/pg_pipeline.h"

#include <poll.h>

#include <string>

namespace dlock::postgres {
namespace {

Status Unknown(std::string_view what, std::string_view where, std::string_view why) {
  return UnavailableError(std::string(what) + " (" + std::string(where) + "): " +
                          std::string(why) + " (the outcome is unknown)");
}

// Queues every call and the Sync in libpq's output buffer.
Status SendAll(PGconn* conn, std::span<const PreparedCall> calls, std::string_view what,
               std::string_view where) {
  if (PQenterPipelineMode(conn) == 0) return FromPg(conn, nullptr, what, where);
  std::vector<const char*> values;
  std::vector<int> lengths;
  for (const PreparedCall& call : calls) {
    call.params.Fill(&values, &lengths);
    if (PQsendQueryPrepared(conn, call.statement, call.params.size(), values.data(),
                            lengths.data(), call.params.formats(), 0) == 0) {
      return FromPg(conn, nullptr, what, where);
    }
  }
  if (PQpipelineSync(conn) == 0) return FromPg(conn, nullptr, what, where);
  return Status::Ok();
}

// Sends what libpq buffered, reading meanwhile: a server blocked on sending
// us results would otherwise never read the rest (libpq's advice).
Status FlushAll(PGconn* conn, SteadyTime deadline, std::string_view what,
                std::string_view where) {
  for (;;) {
    const int f = PQflush(conn);
    if (f == 0) return Status::Ok();
    if (f < 0) return FromPg(conn, nullptr, what, where);
    const int r = PollFd(PQsocket(conn), POLLOUT | POLLIN, deadline);
    if (r == 0) return Unknown(what, where, "no reply within the time limit");
    if (r > 0 && PQconsumeInput(conn) == 0) return FromPg(conn, nullptr, what, where);
  }
}

// The next result, waiting for it until the deadline; null between two
// statements' results.
Result<PgResultHandle> Next(PGconn* conn, SteadyTime deadline, std::string_view what,
                            std::string_view where) {
  while (PQisBusy(conn) != 0) {
    const int r = PollFd(PQsocket(conn), POLLIN, deadline);
    if (r == 0) return Unknown(what, where, "no reply within the time limit");
    if (r < 0) return Unknown(what, where, "poll failed");
    if (PQconsumeInput(conn) == 0) return FromPg(conn, nullptr, what, where);
  }
  return PgResultHandle(PQgetResult(conn));
}

}  // namespace

Result<PipelineOutcome> RunPipeline(PGconn* conn, std::span<const PreparedCall> calls,
                                    SteadyTime deadline, std::string_view what,
                                    std::string_view where) {
  DLOCK_RETURN_IF_ERROR(SendAll(conn, calls, what, where));
  DLOCK_RETURN_IF_ERROR(FlushAll(conn, deadline, what, where));
  PipelineOutcome out;
  out.results.resize(calls.size());
  // Each statement answers with its result (an error, or "aborted" after
  // one) and a null; the Sync with PGRES_PIPELINE_SYNC.
  std::size_t i = 0;
  for (;;) {
    DLOCK_ASSIGN_OR_RETURN(PgResultHandle result, Next(conn, deadline, what, where));
    if (!result) {
      ++i;
      continue;
    }
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_PIPELINE_SYNC) break;
    if (PQstatus(conn) != CONNECTION_OK) {
      // The server ended the session (a FATAL error): nothing is known.
      return UnavailableError(FromPg(conn, result.get(), what, where).message() +
                              " (the connection was lost; the outcome is unknown)");
    }
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      if (i < out.results.size()) out.results[i] = std::move(result);
    } else if (status != PGRES_PIPELINE_ABORTED && !out.failed) {
      out.failed = true;
      out.failure = FromPg(conn, result.get(), what, where);
    }
  }
  if (PQexitPipelineMode(conn) == 0) return FromPg(conn, nullptr, what, where);
  if (!out.failed && i != calls.size()) {
    return Unknown(what, where,
                   "the server answered " + std::to_string(i) + " of " +
                       std::to_string(calls.size()) + " statements");
  }
  return out;
}

}  // namespace dlock::postgres
