#include "core/uri.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace dlock::internal {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Decodes %XX escapes. A '%' not followed by two hex digits is an error,
// except in the user information (`lenient`), where it is taken as written:
// people paste passwords into URIs unescaped.
Result<std::string> PercentDecode(std::string_view in, std::string_view what,
                                  bool lenient = false) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const int hi = in[i] == '%' && i + 1 < in.size() ? HexDigit(in[i + 1]) : -1;
    const int lo = hi >= 0 && i + 2 < in.size() ? HexDigit(in[i + 2]) : -1;
    if (in[i] != '%' || (lenient && lo < 0)) {
      out += in[i];
      continue;
    }
    if (lo < 0) return InvalidArgumentError("bad percent-escape in URI " + std::string(what));
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// Escapes what would end or split a URI part: everything but unreserved
// characters and those in `keep`.
std::string PercentEncode(std::string_view in, std::string_view keep) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : in) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' ||
        keep.find(c) != std::string_view::npos) {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

// What may be shown of text that failed to parse as a URI: up to the first
// character that could begin a password.
std::string ShowableStart(std::string_view text) {
  return std::string(text.substr(0, std::min<std::size_t>(text.find_first_of(":@"), 64)));
}

Status SplitUserInfo(std::string_view userinfo, Uri& uri) {
  const std::size_t colon = userinfo.find(':');
  DLOCK_ASSIGN_OR_RETURN(uri.user, PercentDecode(userinfo.substr(0, colon), "user name", true));
  if (colon == std::string_view::npos) return Status::Ok();
  DLOCK_ASSIGN_OR_RETURN(uri.password, PercentDecode(userinfo.substr(colon + 1), "password", true));
  uri.has_password = true;
  return Status::Ok();
}

Status ParseQuery(std::string_view query, Uri& uri) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    DLOCK_ASSIGN_OR_RETURN(std::string key, PercentDecode(item.substr(0, eq), "parameter"));
    std::string value;
    if (eq != std::string_view::npos) {
      DLOCK_ASSIGN_OR_RETURN(value, PercentDecode(item.substr(eq + 1), "parameter value"));
    }
    uri.query.emplace_back(std::move(key), std::move(value));
  }
  return Status::Ok();
}

}  // namespace

bool IsSecretParam(std::string_view name) {
  std::string key(name);
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (key.ends_with("_file") || key.ends_with("_env")) return false;  // where, not what
  return key.find("password") != std::string::npos || key.find("secret") != std::string::npos ||
         key.find("token") != std::string::npos;
}

Result<Uri> ParseUri(std::string_view text) {
  Uri uri;
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError("'" + ShowableStart(text) +
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
  // The user information ends at the LAST '@' (sqlite:///path has none):
  // a password may then hold any character unescaped, '/', '?', '#' and
  // '@' included. An '@' after the host must be written %40.
  if (!rest.starts_with('/')) {
    if (std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
      DLOCK_RETURN_IF_ERROR(SplitUserInfo(rest.substr(0, at), uri));
      rest.remove_prefix(at + 1);
    }
  }
  std::string_view query;
  if (std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const std::size_t slash = rest.find('/');
  uri.hosts = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) {
    DLOCK_ASSIGN_OR_RETURN(uri.path, PercentDecode(rest.substr(slash), "path"));
  }
  DLOCK_RETURN_IF_ERROR(ParseQuery(query, uri));
  return uri;
}

namespace {

// scheme://[user[:password]@]hosts/path?query, `password` as given.
enum class SecretParams { kShow, kMask, kDrop };

std::string Assemble(const Uri& uri, std::optional<std::string_view> password,
                     SecretParams secrets) {
  std::string s = uri.scheme + "://";
  if (!uri.user.empty() || password) {
    s += PercentEncode(uri.user, "");
    if (password) s += ":" + std::string(*password);
    s += "@";
  }
  s += PercentEncode(uri.hosts, ":,[]");
  s += PercentEncode(uri.path, "/");
  std::vector<std::pair<std::string, std::string>> query = uri.query;
  if (uri.has_password && uri.password_source != Uri::PasswordSource::kUri) {
    query.emplace_back(
        uri.password_source == Uri::PasswordSource::kFile ? "password_file" : "password_env",
        uri.password_from);
  }
  char separator = '?';
  for (const auto& [k, v] : query) {
    const bool secret = IsSecretParam(k);
    if (secret && secrets == SecretParams::kDrop) continue;
    s += separator + PercentEncode(k, "") + "=";
    s += secret && secrets == SecretParams::kMask ? "***" : PercentEncode(v, "/:,");
    separator = '&';
  }
  return s;
}

}  // namespace

std::string Uri::Format(bool with_password) const {
  const bool inline_password = has_password && password_source == PasswordSource::kUri;
  if (with_password) {
    return Assemble(*this,
                    inline_password ? std::optional<std::string>(PercentEncode(password, ""))
                                    : std::nullopt,
                    SecretParams::kShow);
  }
  return Assemble(*this, std::nullopt, SecretParams::kDrop);
}

std::string Uri::Redacted() const {
  const bool inline_password = has_password && password_source == PasswordSource::kUri;
  return Assemble(*this, inline_password ? std::optional<std::string_view>("***") : std::nullopt,
                  SecretParams::kMask);
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
