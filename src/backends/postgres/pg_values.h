// Values going into a PostgreSQL statement (Params, the parameters of one
// prepared statement) and coming out of its result (Value, IntValue,
// IsNull), for the backend's calls one at a time and pipelined.
#ifndef DLOCK_SRC_BACKENDS_POSTGRES_PG_VALUES_H_
#define DLOCK_SRC_BACKENDS_POSTGRES_PG_VALUES_H_

#include <libpq-fe.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlock::postgres {

// Parameters of one statement: bytea in binary (any bytes, no escaping),
// everything else as text.
class Params {
 public:
  Params& Bytes(std::string_view value) {
    Add(std::string(value), 1);
    return *this;
  }
  Params& Text(std::string value) {
    Add(std::move(value), 0);
    return *this;
  }
  Params& Int(std::int64_t value) { return Text(std::to_string(value)); }
  Params& Null() {
    values_.emplace_back();
    null_.push_back(true);
    formats_.push_back(0);
    return *this;
  }

  int size() const { return static_cast<int>(values_.size()); }
  // Valid while this object lives and is not changed.
  void Fill(std::vector<const char*>* values, std::vector<int>* lengths) const {
    values->clear();
    lengths->clear();
    for (std::size_t i = 0; i < values_.size(); ++i) {
      values->push_back(null_[i] ? nullptr : values_[i].data());
      lengths->push_back(static_cast<int>(values_[i].size()));
    }
  }
  const int* formats() const { return formats_.data(); }

 private:
  void Add(std::string value, int format) {
    values_.push_back(std::move(value));
    null_.push_back(false);
    formats_.push_back(format);
  }
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> formats_;
};

inline std::string ArrayLiteral(const std::vector<std::string>& items) {
  // Only hex digits and decimal numbers go in here: nothing to quote.
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += items[i];
  }
  return out + "}";
}

inline bool IsNull(const PGresult* r, int row, int col) { return PQgetisnull(r, row, col) != 0; }
inline std::string Value(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}
inline std::int64_t IntValue(const PGresult* r, int row, int col) {
  return std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}

}  // namespace dlock::postgres

#endif  // DLOCK_SRC_BACKENDS_POSTGRES_PG_VALUES_H_
