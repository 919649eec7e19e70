#include "backends/redis/redis_slot_map.h"

#include <algorithm>
#include <charconv>

#include "backends/redis/redis_conn.h"

namespace dlock::redis {
namespace {

constexpr std::string_view kSlotsForm =
    "an array of [first slot, last slot, [host, port, id], replicas...] with slots 0-16383";
constexpr std::string_view kRedirectForm = "'MOVED <slot 0-16383> <host>:<port>' or 'ASK ...'";

Status Malformed(std::string_view server, const std::string& why) {
  return UnavailableError("read the cluster's slot map: Redis at " + std::string(server) +
                          " answered CLUSTER SLOTS with a malformed reply (" + why +
                          "); expected " + std::string(kSlotsForm));
}

// A node entry [host, port, id, ...] of a slot range; nullopt for a node
// whose address the cluster does not know ("?").
Result<std::optional<Endpoint>> NodeOf(const redisReply* r, const Endpoint& asked,
                                       std::string_view server) {
  long long port = 0;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      (r->element[0]->type != REDIS_REPLY_STRING && r->element[0]->type != REDIS_REPLY_NIL) ||
      !ReplyInt(r->element[1], &port) || port < 1 || port > 65535) {
    return Malformed(server, "a node that is not [host, port 1-65535, ...]");
  }
  Endpoint e{ReplyString(r->element[0]), static_cast<int>(port)};
  // NULL (cluster-preferred-endpoint-type unknown-endpoint) or empty: the
  // node is reached at the address the map was asked at, on its own port.
  if (e.host.empty()) e.host = asked.host;
  // "?": a preferred hostname that the node has not announced. Nothing
  // says where it is; its slots stay unserved here until a MOVED names it.
  if (e.host == "?") return std::optional<Endpoint>();
  return std::optional<Endpoint>(std::move(e));
}

}  // namespace

std::optional<Endpoint> SlotMap::PrimaryOf(std::uint16_t slot) const {
  if (slot >= kSlotCount || owner[slot] == kNone) return std::nullopt;
  return primaries[owner[slot]];
}

void SlotMap::Assign(std::uint16_t slot, const Endpoint& node) {
  if (slot >= kSlotCount) return;
  for (std::size_t i = 0; i < primaries.size(); ++i) {
    if (primaries[i].host == node.host && primaries[i].port == node.port) {
      owner[slot] = static_cast<std::uint16_t>(i);
      return;
    }
  }
  primaries.push_back(node);
  owner[slot] = static_cast<std::uint16_t>(primaries.size() - 1);
}

Result<SlotMap> ParseClusterSlots(const redisReply* reply, const Endpoint& asked,
                                  std::string_view server) {
  if (reply->type == REDIS_REPLY_ERROR) {
    return ReplyError(reply, server, "read the cluster's slot map");
  }
  if (reply->type != REDIS_REPLY_ARRAY) return Malformed(server, "not an array");
  SlotMap map;
  std::size_t unknown = 0;  // ranges whose primary has no known address
  for (std::size_t i = 0; i < reply->elements; ++i) {
    const redisReply* range = reply->element[i];
    long long first = -1, last = -1;
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        !ReplyInt(range->element[0], &first) || !ReplyInt(range->element[1], &last) || first < 0 ||
        last < first || last >= kSlotCount) {
      return Malformed(server, "range " + std::to_string(i + 1) +
                                   " is not [first, last, node] "
                                   "with 0 <= first <= last <= 16383");
    }
    DLOCK_ASSIGN_OR_RETURN(std::optional<Endpoint> primary,
                           NodeOf(range->element[2], asked, server));
    for (std::size_t n = 2; n < range->elements; ++n) {
      DLOCK_ASSIGN_OR_RETURN(std::optional<Endpoint> node, NodeOf(range->element[n], asked, server));
      if (node) map.nodes.push_back(std::move(*node));
    }
    if (!primary) {
      ++unknown;
      continue;
    }
    for (long long slot = first; slot <= last; ++slot) {
      if (map.owner[slot] != SlotMap::kNone) {
        return Malformed(server, "slot " + std::to_string(slot) + " is listed twice");
      }
      map.Assign(static_cast<std::uint16_t>(slot), *primary);
    }
  }
  if (map.primaries.empty() && unknown > 0) {
    return UnavailableError("read the cluster's slot map: Redis at " + std::string(server) +
                            " names no primary by an address a client can use ('?': set "
                            "cluster-announce-hostname on each node, or "
                            "cluster-preferred-endpoint-type to ip)");
  }
  if (map.primaries.empty()) return Malformed(server, "no slot is served");
  return map;
}

Result<std::optional<Redirect>> ParseRedirect(std::string_view error, const Endpoint& from,
                                              std::string_view server) {
  Redirect r;
  const std::string_view original = error;
  // The word alone is a redirection too, a malformed one.
  auto word = [&](std::string_view w) {
    return error.starts_with(w) && (error.size() == w.size() || error[w.size()] == ' ');
  };
  if (word("MOVED")) {
    error.remove_prefix(std::min<std::size_t>(error.size(), 6));
  } else if (word("ASK")) {
    error.remove_prefix(std::min<std::size_t>(error.size(), 4));
    r.ask = true;
  } else {
    return std::optional<Redirect>();
  }
  auto bad = [&] {
    return UnavailableError("Redis at " + std::string(server) + " sent a malformed redirection '" +
                            std::string(original.substr(0, 80)) + "'; expected " +
                            std::string(kRedirectForm));
  };
  const std::size_t space = error.find(' ');
  const std::size_t colon = error.rfind(':');  // an IPv6 host keeps its own colons
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) {
    return bad();
  }
  unsigned slot = 0;
  int port = 0;
  const std::string_view slot_text = error.substr(0, space);
  const std::string_view port_text = error.substr(colon + 1);
  auto [p, ec] = std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot);
  auto [q, ec2] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || p != slot_text.data() + slot_text.size() || slot >= kSlotCount ||
      ec2 != std::errc() || q != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return bad();
  }
  r.slot = static_cast<std::uint16_t>(slot);
  r.node.host = std::string(error.substr(space + 1, colon - space - 1));
  if (r.node.host.starts_with('[') && r.node.host.ends_with(']')) {
    r.node.host = r.node.host.substr(1, r.node.host.size() - 2);
  }
  if (r.node.host == "?") {
    return UnavailableError("Redis at " + std::string(server) + " redirected to a node whose " +
                            "address it does not know ('" + std::string(original.substr(0, 80)) +
                            "'): set cluster-announce-hostname on each node, or "
                            "cluster-preferred-endpoint-type to ip");
  }
  if (r.node.host.empty()) r.node.host = from.host;
  r.node.port = port;
  return std::optional<Redirect>(std::move(r));
}

}  // namespace dlock::redis
