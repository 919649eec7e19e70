// dlock's tables, sequence and procedures in the database the URI names:
// found, or created when missing (by the first client, the others waiting
// for it), or refused when something of the same name is not dlock's.
#ifndef DLOCK_SRC_BACKENDS_MARIADB_MARIADB_SCHEMA_H_
#define DLOCK_SRC_BACKENDS_MARIADB_MARIADB_SCHEMA_H_

#include <string>

#include "backends/mariadb/mariadb_conn.h"
#include "backends/mariadb/mariadb_sql.h"
#include "dlock/status.h"

namespace dlock::mariadb {

// The server must be MariaDB 10.6 or later (sequences, JSON_TABLE):
// kFailedPrecondition, naming what it is, otherwise.
Status CheckServer(Connection& conn, const std::string& where);

// Creates what is missing, under a server-wide user lock so that clients
// starting together create it once. kFailedPrecondition when a table or
// procedure of one of dlock's names exists without dlock's comment (not
// dlock's, or another schema version); kPermissionDenied when the user may
// not create what is missing.
Status EnsureSchema(Connection& conn, const SchemaNames& names, SteadyTime deadline,
                    const std::string& where);

}  // namespace dlock::mariadb

#endif  // DLOCK_SRC_BACKENDS_MARIADB_MARIADB_SCHEMA_H_
