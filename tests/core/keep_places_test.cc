// The KeepPlaces contract cases of the conformance suite
// (tests/conformance/keep_places_cases.h) on the in-memory store, the
// reference the real stores are held to. Real time.
#include <memory>

#include <gtest/gtest.h>

#include "../conformance/keep_places_cases.h"
#include "dlock/testing/in_memory_backend.h"

namespace dlock {
namespace {

using testing::InMemoryBackend;
using testing::InMemoryStore;

class InMemoryKeepPlacesTest : public ::testing::Test {
 protected:
  testing::OpenBackend Open() {
    return [store = store_] { return std::make_unique<InMemoryBackend>(store); };
  }
  std::shared_ptr<InMemoryStore> store_ = std::make_shared<InMemoryStore>(DefaultClock());
};

TEST_F(InMemoryKeepPlacesTest, AKeptPlaceStaysAheadOfALaterWaiter) {
  testing::KeptPlaceStaysAheadOfALaterWaiter(Open(), "keep-ahead");
}

TEST_F(InMemoryKeepPlacesTest, AHoldingIsNeverTouched) {
  testing::KeepPlacesNeverTouchesAHolding(Open(), "keep-holding");
}

TEST_F(InMemoryKeepPlacesTest, AnOwnerWithoutAPlaceIsNotFound) {
  testing::KeepPlacesAnswersNotFoundWithoutAPlace(Open(), "keep-none");
}

TEST_F(InMemoryKeepPlacesTest, ALapsedPlaceAheadWakesTheWaiterBehindIt) {
  testing::ALapsedPlaceAheadWakesTheWaiterBehindIt(Open(), "keep-lapsed");
}

}  // namespace
}  // namespace dlock
