package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// --poll-follow-within: 0 turns following off (mq's -1), a negative value
// is a usage error naming the flag, anything else goes to the pollers as
// is.
func TestServePollFollowWithin(t *testing.T) {
	for flag, want := range map[time.Duration]time.Duration{0: -1, 10 * time.Millisecond: 10 * time.Millisecond, time.Second: time.Second} {
		if got := followWithin(flag); got != want {
			t.Errorf("followWithin(%v) = %v, want %v", flag, got, want)
		}
	}
	a, _, errb := testApp(nil)
	if code := a.main(context.Background(), []string{"serve", "--poll-follow-within=-1ms"}); code != 2 || !strings.Contains(errb.String(), "--poll-follow-within") {
		t.Errorf("a negative --poll-follow-within: exit %d, stderr %q; want 2 naming the flag", code, errb)
	}
}
