#include "backends/mariadb/mariadb_schema.h"

#include <map>

namespace dlock::mariadb {
namespace {

// The objects found, by name, with their comments.
Result<std::map<std::string, std::string>> Find(Connection& conn, const SchemaNames& names,
                                                SteadyTime deadline) {
  DLOCK_ASSIGN_OR_RETURN(ResultSets found,
                         conn.Query(FindSchemaSql(names), deadline, "look for dlock's tables"));
  std::map<std::string, std::string> out;
  if (found.empty()) return out;
  for (const Row& row : found[0]) {
    if (row.size() == 2 && row[0]) out[*row[0]] = row[1].value_or("");
  }
  return out;
}

// Whether everything is there; kFailedPrecondition for an object that is
// not dlock's (of this schema).
Result<bool> Complete(const std::map<std::string, std::string>& found, const SchemaNames& names,
                      const std::string& where) {
  std::size_t present = 0;
  for (const auto& [name, comment] : found) {
    if (comment != kSchemaComment) {
      return FailedPreconditionError(
          "'" + name + "' in the database of " + where + " exists but is not dlock's ('" +
          kSchemaComment + "' expected as its comment, found '" + comment +
          "'); choose another name with ?table=NAME");
    }
    ++present;
  }
  return present == names.tables.size() + names.procedures.size();
}

}  // namespace

Status CheckServer(Connection& conn, const std::string& where) {
  const unsigned long version = mysql_get_server_version(conn.get());
  const std::string info = mysql_get_server_info(conn.get());
  if (info.find("MariaDB") == std::string::npos || version < 100600) {
    return FailedPreconditionError("the server of " + where + " is '" + info +
                                   "': dlock needs MariaDB 10.6 or later (sequences, JSON_TABLE)");
  }
  return Status::Ok();
}

Status EnsureSchema(Connection& conn, const SchemaNames& names, SteadyTime deadline,
                    const std::string& where) {
  DLOCK_ASSIGN_OR_RETURN(auto found, Find(conn, names, deadline));
  DLOCK_ASSIGN_OR_RETURN(bool complete, Complete(found, names, where));
  if (complete) return Status::Ok();
  // One creator at a time: the others wait here, then find it all.
  const std::string lock = HexLiteral("dlock schema " + names.locks);
  const auto wait_s = std::chrono::duration<double>(deadline - SteadyClock::now()).count();
  DLOCK_ASSIGN_OR_RETURN(
      ResultSets got,
      conn.Query("SELECT GET_LOCK(" + lock + ", " + std::to_string(std::max(0.0, wait_s)) + ")",
                 deadline, "wait for another client creating dlock's tables"));
  if (got.empty() || got[0].empty() || got[0][0].size() != 1 || got[0][0][0] != "1") {
    return UnavailableError("create dlock's tables (" + where +
                            "): another client kept creating them past the connect timeout");
  }
  Status created = [&]() -> Status {
    DLOCK_ASSIGN_OR_RETURN(found, Find(conn, names, deadline));
    DLOCK_ASSIGN_OR_RETURN(complete, Complete(found, names, where));
    if (complete) return Status::Ok();
    for (const std::string& sql : CreateSchemaSql(names)) {
      DLOCK_RETURN_IF_ERROR(conn.Query(sql, deadline, "create dlock's tables").status());
    }
    return Status::Ok();
  }();
  (void)conn.Query("DO RELEASE_LOCK(" + lock + ")", deadline, "let other clients in");
  return created;
}

}  // namespace dlock::mariadb
