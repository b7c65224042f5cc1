//go:build race

package mq

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = true
