package main

import "testing"

// skipSDKRace skips a test that takes the broker away under a live queue
// stream send when it runs under the race detector: kubemq-go v1.9.0's
// upstream.clearPendingTransactions (queues_stream/upstream.go) ranges over
// its pending-transaction map while Send's setTransaction writes it, so a
// stream lost during a Send is a data race inside the SDK that inferq
// cannot fix (the downstream twin is skipped in consumer, mq and client).
// 'make test' runs these tests again without -race (see the Makefile).
func skipSDKRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("kubemq-go v1.9.0 has a data race on stream loss during Send (upstream.clearPendingTransactions); run without -race")
	}
}
