// Backend::KeepPlaces on every store that keeps places in batches
// (KeepsPlaces); the others skip, saying so. The cases are
// keep_places_cases.h, which the in-memory store runs too.
#include <gtest/gtest.h>

#include "conformance_store.h"
#include "keep_places_cases.h"

namespace dlock {
namespace {

class KeepPlacesConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto probe = OpenStore();
    ASSERT_TRUE(probe) << "the store " << StoreUri() << " does not open";
    if (!probe->KeepsPlaces()) {
      GTEST_SKIP() << probe->Describe()
                   << " does not keep places in batches (KeepsPlaces is false): its waiters "
                      "keep their places by attempting";
    }
  }
  static testing::OpenBackend Open() {
    return [] { return OpenStore(); };
  }
};

TEST_F(KeepPlacesConformanceTest, AKeptPlaceStaysAheadOfALaterWaiter) {
  testing::KeptPlaceStaysAheadOfALaterWaiter(Open(), UniqueKey("keep-ahead"));
}

TEST_F(KeepPlacesConformanceTest, AHoldingIsNeverTouched) {
  testing::KeepPlacesNeverTouchesAHolding(Open(), UniqueKey("keep-holding"));
}

TEST_F(KeepPlacesConformanceTest, AnOwnerWithoutAPlaceIsNotFound) {
  testing::KeepPlacesAnswersNotFoundWithoutAPlace(Open(), UniqueKey("keep-none"));
}

TEST_F(KeepPlacesConformanceTest, ALapsedPlaceAheadWakesTheWaiterBehindIt) {
  testing::ALapsedPlaceAheadWakesTheWaiterBehindIt(Open(), UniqueKey("keep-lapsed"));
}

}  // namespace
}  // namespace dlock
