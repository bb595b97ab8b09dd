package dispatchtest

import (
	"testing"
)

// tests are the contract's cases, by name.
var tests = map[string]func(t *testing.T, newEnv NewEnv){
	"EveryEventTypeHasOneBodyShape":          testEveryEventTypeHasOneBodyShape,
	"EveryEntryDeliveredInOrder":             testEveryEntryDeliveredInOrder,
	"TwoDispatchersRace":                     testTwoDispatchersRace,
	"EndpointGetsEntriesFromItsCreation":     testEndpointGetsEntriesFromItsCreation,
	"DisabledEndpointGetsNothing":            testDisabledEndpointGetsNothing,
	"Notify":                                 testNotify,
	"BadRequestsAreRefused":                  testBadRequestsAreRefused,
	"ExpiredClaimIsTakenOver":                testExpiredClaimIsTakenOver,
	"EndpointMadeJustBeforeAnEntry":          testEndpointMadeJustBeforeAnEntry,
	"StoppedDispatcherReleasesItsQueues":     testStoppedDispatcherReleasesItsQueues,
	"RedeliverFromATime":                     testRedeliverFromATime,
	"EndpointsPage":                          testEndpointsPage,
	"EndpointsRoundTrip":                     testEndpointsRoundTrip,
	"EndpointNotFound":                       testEndpointNotFound,
	"RotationSignsWithBothSecretsForADay":    testRotationSignsWithBothSecretsForADay,
	"UpdateKeepsIdentityAndRetriesALostRace": testUpdateKeepsIdentityAndRetriesALostRace,
	"ReceiverFailingForAWhile":               testReceiverFailingForAWhile,
	"ReceiverTimesOut":                       testReceiverTimesOut,
	"ReceiverDownComesBack":                  testReceiverDownComesBack,
	"GoneDisablesTheEndpoint":                testGoneDisablesTheEndpoint,
	"LastAttemptThenNextAndRedeliver":        testLastAttemptThenNextAndRedeliver,
	"ThrottledQueueWritesAreWrittenAgain":    testThrottledQueueWritesAreWrittenAgain,
	"FailureThenSuccessKeepsBothAttempts":    testFailureThenSuccessKeepsBothAttempts,
	"RedeliveryKeepsEarlierAttempts":         testRedeliveryKeepsEarlierAttempts,
	"AttemptLogIsBounded":                    testAttemptLogIsBounded,
	"WaitingBehindAFailingEventIsPending":    testWaitingBehindAFailingEventIsPending,
	"DeliveriesListedNewestFirst":            testDeliveriesListedNewestFirst,
	"NoticeAttemptLogIsBounded":              testNoticeAttemptLogIsBounded,
	"DirectSendsKeepNoQueue":                 testDirectSendsKeepNoQueue,
	"DirectFailureParksTheUser":              testDirectFailureParksTheUser,
	"ManyQueuesAndRowsAtOnce":                testManyQueuesAndRowsAtOnce,
	"RedeliveredEventsListedAsWaiting":       testRedeliveredEventsListedAsWaiting,
	"EveryUsersListingShowsWaitingEvents":    testEveryUsersListingShowsWaitingEvents,
	"PackedSuccessesListed":                  testPackedSuccessesListed,
	"FailureRowThenPackedSuccess":            testFailureRowThenPackedSuccess,
	"RedeliveryFindsPackedUsers":             testRedeliveryFindsPackedUsers,
	"PacksKeepTheirBounds":                   testPacksKeepTheirBounds,
	"RedeliveryFencesRememberedUsers":        testRedeliveryFencesRememberedUsers,
	"ShardTakenForgetsUsers":                 testShardTakenForgetsUsers,
	"SlowDirectAttemptIsEndedAndQueued":      testSlowDirectAttemptIsEndedAndQueued,
	"ListingLooksAtABoundedHistory":          testListingLooksAtABoundedHistory,
}

// Contract runs every case on stores newEnv makes (a fresh one per case).
func Contract(t *testing.T, newEnv NewEnv) {
	t.Helper()
	for name, test := range tests {
		t.Run(name, func(t *testing.T) { test(t, newEnv) })
	}
}
