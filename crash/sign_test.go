package crash

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
)

var (
	testKey  = []byte("fleet-key-0123456789abcdef")
	otherKey = []byte("someone-else-0123456789abc")
)

// A signed report (issue 27 item 2) verifies under its key, channel and
// time only: any field changed, another key, another channel, no
// signature, or a time outside the window (a replay) is refused, each
// with its reason.
func TestReportSignature(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const ch, window = "tasks.mlp.crashes", time.Hour
	base := report(journalA, incarn1, "m-1", 2, "m\n2", 1)
	signed := base.Sign(testKey, ch, now.Add(-time.Minute))
	body, err := signed.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeReport(body)
	if err != nil {
		t.Fatalf("a signed report does not decode: %v", err)
	}
	if err := back.Verify(testKey, ch, now, window); err != nil {
		t.Fatalf("a signed report does not verify: %v", err)
	}
	if !back.SignedAt().Equal(now.Add(-time.Minute)) {
		t.Errorf("SignedAt %v", back.SignedAt())
	}
	tampered := map[string]func(r *Report){
		"journal":      func(r *Report) { r.Journal = journalB },
		"incarnation":  func(r *Report) { r.Incarnation = incarn2 },
		"reporter":     func(r *Report) { r.Reporter = "other" },
		"token":        func(r *Report) { r.Crashes[0].Token = Token("victim") },
		"count":        func(r *Report) { r.Crashes[0].N = 200 },
		"count added":  func(r *Report) { r.Crashes = append(r.Crashes, Count{Token: Token("victim"), N: 200}) },
		"count gone":   func(r *Report) { r.Crashes = r.Crashes[:1] },
		"time":         func(r *Report) { r.At += 1 },
		"signature":    func(r *Report) { r.Sig = strings.Repeat("0", 64) },
		"order":        func(r *Report) { r.Crashes[0], r.Crashes[1] = r.Crashes[1], r.Crashes[0] },
		"field shifts": func(r *Report) { r.Journal, r.Incarnation = r.Incarnation, r.Journal },
	}
	for name, change := range tampered {
		r := back
		r.Crashes = append([]Count(nil), back.Crashes...)
		change(&r)
		if err := r.Verify(testKey, ch, now, window); !errors.Is(err, ErrForged) {
			t.Errorf("%s changed: %v, want ErrForged", name, err)
		}
	}
	for name, tc := range map[string]struct {
		r    Report
		key  []byte
		ch   string
		want error
	}{
		"unsigned":            {base, testKey, ch, ErrUnsigned},
		"another key":         {base.Sign(otherKey, ch, now), testKey, ch, ErrForged},
		"another channel":     {base.Sign(testKey, "other.crashes", now), testKey, ch, ErrForged},
		"older than window":   {base.Sign(testKey, ch, now.Add(-window-time.Second)), testKey, ch, ErrStale},
		"from the future":     {base.Sign(testKey, ch, now.Add(maxClockSkew+time.Second)), testKey, ch, ErrStale},
		"slightly ahead":      {base.Sign(testKey, ch, now.Add(maxClockSkew/2)), testKey, ch, nil},
		"at the window's end": {base.Sign(testKey, ch, now.Add(-window)), testKey, ch, nil},
	} {
		if err := tc.r.Verify(tc.key, tc.ch, now, window); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	for _, key := range [][]byte{nil, []byte("short"), bytes.Repeat([]byte{'k'}, MinKeyBytes-1)} {
		if err := CheckKey(key); err == nil {
			t.Errorf("CheckKey(%d bytes): no error", len(key))
		}
	}
	if err := CheckKey(testKey); err != nil {
		t.Errorf("CheckKey: %v", err)
	}
}

// The decoder takes a signature's fields only in the form Sign writes
// them: both or neither, a positive time, 64 lowercase hex digits.
func TestDecodeReportSignatureFields(t *testing.T) {
	ok := `{"v":1,"journal":"` + journalA + `","incarnation":"` + incarn1 + `","reporter":"h","crashes":[],"at":1700000000000,"sig":"` + strings.Repeat("ab", 32) + `"}`
	if _, err := DecodeReport([]byte(ok)); err != nil {
		t.Fatalf("signed report refused: %v", err)
	}
	for name, body := range map[string]string{
		"time without signature": strings.Replace(ok, `,"sig":"`+strings.Repeat("ab", 32)+`"`, ``, 1),
		"signature without time": strings.Replace(ok, `"at":1700000000000,`, ``, 1),
		"negative time":          strings.Replace(ok, `1700000000000`, `-5`, 1),
		"short signature":        strings.Replace(ok, strings.Repeat("ab", 32), "abab", 1),
		"upper hex signature":    strings.Replace(ok, strings.Repeat("ab", 32), strings.Repeat("AB", 32), 1),
	} {
		if r, err := DecodeReport([]byte(body)); err == nil {
			t.Errorf("%s: accepted as %+v", name, r)
		}
	}
}

// refusals counts Refused's calls by reason.
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(reason string) { r.mu.Lock(); r.n[reason]++; r.mu.Unlock() }

func (r *refusals) get(reason string) int { r.mu.Lock(); defer r.mu.Unlock(); return r.n[reason] }

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// With a key (issue 27 item 2), a fleet signs its own reports and counts
// only the reports signed with that key for that channel within the
// window: unsigned, forged, stale (a replay of an old signed report) and
// malformed ones are refused, counted by reason, and logged once a minute
// at most, however many come.
func TestFleetRefusesUnsignedReports(t *testing.T) {
	const ch = "tasks.mlp.crashes"
	dir := t.TempDir()
	j := openTestJournal(t, dir)
	if err := j.Start("mine"); err != nil {
		t.Fatal(err)
	}
	j = crashAndReopen(t, j, dir)
	ev := &fakeEvents{sent: map[string][][]byte{}, subs: map[string]chan mq.Event{}}
	refused := &refusals{n: map[string]int{}}
	var logs lockedLog
	f := NewFleet(FleetConfig{Events: ev, Key: testKey, Refused: refused.add, Window: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, j, []string{"tasks.mlp"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	send := func(r Report) {
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		_ = ev.SendEventStore(ctx, ch, b, nil)
	}
	victim := report(journalB, incarn1, "victim", 50)
	const each = 40
	for range each {
		send(victim)                                                 // unsigned
		send(victim.Sign(otherKey, ch, time.Now()))                  // forged
		send(victim.Sign(testKey, "other.q.crashes", time.Now()))    // another queue's
		send(victim.Sign(testKey, ch, time.Now().Add(-2*time.Hour))) // a replay
		_ = ev.SendEventStore(ctx, ch, []byte(`{"v":1}`), nil)       // malformed
	}
	send(report(journalC, incarn2, "genuine", 2).Sign(testKey, ch, time.Now()))
	waitUntil(t, "the genuine report", func() bool { return f.Crashes("genuine", 0) == 2 })
	if got := f.Crashes("victim", 0); got != 0 {
		t.Errorf("Crashes(victim) = %d, want 0: no report for it is genuine", got)
	}
	waitUntil(t, "every refusal", func() bool {
		return refused.get(RefusedUnsigned) == each && refused.get(RefusedForged) == 2*each &&
			refused.get(RefusedStale) == each && refused.get(RefusedMalformed) == each
	})
	if n := strings.Count(logs.String(), "crash report refused"); n != 1 {
		t.Errorf("%d log lines for %d refused reports, want 1 (rate-limited):\n%s", n, 5*each, logs.String())
	}
	// Its own report is signed, and verifies.
	own := 0
	for _, b := range ev.sentOn(ch) {
		if r, err := DecodeReport(b); err == nil && r.Journal == j.ID() {
			own++
			if err := r.Verify(testKey, ch, time.Now(), time.Hour); err != nil || r.Crashes[0].Token != Token("mine") {
				t.Errorf("own report %+v: %v", r, err)
			}
		}
	}
	if own != 1 {
		t.Errorf("%d own reports on the channel, want 1", own)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
