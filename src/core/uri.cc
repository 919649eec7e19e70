#include "core/uri.h"

#include <algorithm>
#include <cctype>

namespace dlock::internal {
namespace {

Result<std::string> PercentDecode(std::string_view in, std::string_view what) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = i + 1 < in.size() ? hex(in[i + 1]) : -1;
    int lo = i + 2 < in.size() ? hex(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError("bad percent-escape in URI " + std::string(what));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

Result<Uri> ParseUri(std::string_view text) {
  Uri uri;
  std::size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError("'" + std::string(text.substr(0, 64)) +
                                "' is not a URI: expected scheme://...");
  }
  for (char c : text.substr(0, colon)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return InvalidArgumentError("malformed URI scheme in '" +
                                  std::string(text.substr(0, colon)) + "'");
    }
    uri.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string_view rest = text.substr(colon + 1);
  if (rest.substr(0, 2) != "//") {
    return InvalidArgumentError("malformed URI for scheme '" + uri.scheme +
                                "': expected " + uri.scheme + "://...");
  }
  rest.remove_prefix(2);

  // Split off the query first; a '?' cannot appear unescaped elsewhere.
  std::string_view query;
  if (std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);

  // Userinfo ends at the last '@' of the authority (passwords may hold '@'
  // only percent-encoded, but be lenient).
  if (std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    std::size_t pc = userinfo.find(':');
    auto user = PercentDecode(userinfo.substr(0, pc), "user name");
    if (!user.ok()) return user.status();
    uri.user = *user;
    if (pc != std::string_view::npos) {
      auto pw = PercentDecode(userinfo.substr(pc + 1), "password");
      if (!pw.ok()) return pw.status();
      uri.password = *pw;
      uri.has_password = true;
    }
  }
  uri.hosts = std::string(authority);
  auto decoded_path = PercentDecode(path, "path");
  if (!decoded_path.ok()) return decoded_path.status();
  uri.path = *decoded_path;

  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    std::size_t eq = item.find('=');
    auto k = PercentDecode(item.substr(0, eq), "parameter");
    if (!k.ok()) return k.status();
    std::string v;
    if (eq != std::string_view::npos) {
      auto dv = PercentDecode(item.substr(eq + 1), "parameter value");
      if (!dv.ok()) return dv.status();
      v = *dv;
    }
    uri.query.emplace_back(*k, v);
  }
  return uri;
}

std::string Uri::Redacted() const {
  std::string s = scheme + "://";
  if (!user.empty() || has_password) {
    s += user;
    if (has_password) s += ":***";
    s += "@";
  }
  s += hosts;
  s += path;
  for (std::size_t i = 0; i < query.size(); ++i) {
    s += (i == 0 ? "?" : "&");
    s += query[i].first;
    // libpq URIs may carry password=... as a parameter.
    std::string key = query[i].first;
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    s += "=";
    s += key == "password" ? "***" : query[i].second;
  }
  return s;
}

const std::string* Uri::Param(std::string_view name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return &v;
  }
  return nullptr;
}

Status Uri::CheckParams(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : query) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (auto n : known) list += (list.empty() ? "" : ", ") + std::string(n);
      return InvalidArgumentError("unknown parameter '" + k + "' in " + scheme +
                                  " URI: accepted: " + (list.empty() ? "none" : list));
    }
  }
  return Status::Ok();
}

}  // namespace dlock::internal
