package oip

import (
	"testing"

	"github.com/inferq/inferq/consumer"
)

// The outcome labels the front ends report or map are the consumer's.
func TestOutcomeLabelsAreTheConsumers(t *testing.T) {
	for _, l := range []struct{ ours, theirs string }{
		{outcomeBadInput, consumer.OutcomeBadInput},
		{outcomeExpired, consumer.OutcomeExpired},
		{outcomeUnknownModel, consumer.OutcomeUnknownModel},
		{outcomeQueueFull, consumer.OutcomeQueueFull},
		{outcomeQueueTimeout, consumer.OutcomeQueueTimeout},
	} {
		if l.ours != l.theirs {
			t.Errorf("label %q, the consumer's is %q", l.ours, l.theirs)
		}
	}
}
