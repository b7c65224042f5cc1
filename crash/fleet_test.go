package crash

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
)

// A journal's id lives in its file: the next process on the directory
// reports under the same id (so its cumulative counts replace, not add
// to, the last process's), a fresh directory gets a new one, and
// Recovered is what the dead process was running plus what it carried.
func TestJournalIDAndRecovered(t *testing.T) {
	dir := t.TempDir()
	j := openTestJournal(t, dir)
	id := j.ID()
	if !isJournalID(id) {
		t.Fatalf("id %q", id)
	}
	if err := j.Start("poison", "mate"); err != nil {
		t.Fatal(err)
	}
	j.Done("mate")
	j2 := crashAndReopen(t, j, dir)
	if j2.ID() != id {
		t.Errorf("id after reopen %q, want %q", j2.ID(), id)
	}
	if err := j2.Start("poison"); err != nil {
		t.Fatal(err)
	}
	j3 := crashAndReopen(t, j2, dir)
	if got := j3.Recovered(); len(got) != 1 || got[Token("poison")] != 2 {
		t.Errorf("recovered %v, want poison: 2", got)
	}
	if j3.ID() != id {
		t.Errorf("id after second reopen %q, want %q", j3.ID(), id)
	}
	if other := openTestJournal(t, t.TempDir()); other.ID() == id {
		t.Error("a fresh journal reuses an id")
	}
	mem, _ := OpenJournal("")
	if !isJournalID(mem.ID()) || mem.ID() == id {
		t.Errorf("memory journal id %q", mem.ID())
	}
}

// A damaged id line is skipped like any damaged line, and a file without
// one (written before ids) gets a new id at open.
func TestJournalIDLineDamaged(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, journalFile), []byte(journalHeader(3)+"J nothex\nS \"m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := openTestJournal(t, dir)
	if !isJournalID(j.ID()) {
		t.Errorf("id %q", j.ID())
	}
	if j.Crashes("m") != 1 {
		t.Errorf("crashes %d, want 1", j.Crashes("m"))
	}
}

// fakeEvents is an events store: one log per channel, subscribers get
// every event from the start; sends fail while down.
type fakeEvents struct {
	mu   sync.Mutex
	down bool
	sent map[string][][]byte
	subs map[string]chan mq.Event
}

func (f *fakeEvents) SendEventStore(_ context.Context, ch string, body []byte, _ map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return mq.ErrUnavailable
	}
	f.sent[ch] = append(f.sent[ch], body)
	if s := f.subs[ch]; s != nil {
		s <- mq.Event{Channel: ch, Body: body, Timestamp: time.Now()}
	}
	return nil
}

func (f *fakeEvents) SubscribeEventsStore(ctx context.Context, ch, _ string, start uint64) (<-chan mq.Event, error) {
	if start != 1 {
		return nil, errors.New("want a subscription from sequence 1")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := make(chan mq.Event, 64)
	f.subs[ch] = s
	for _, b := range f.sent[ch] {
		s <- mq.Event{Channel: ch, Body: b, Timestamp: time.Now()}
	}
	go func() { <-ctx.Done(); f.mu.Lock(); close(s); delete(f.subs, ch); f.mu.Unlock() }()
	return s, nil
}

func (f *fakeEvents) setDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// A process that starts with crash counts publishes them on each queue's
// crash channel (retrying while the events store is away, without holding
// anything up), reads every replica's reports, refuses a forged one, and
// holds a crashed message only once another replica is heard of.
func TestFleetPublishAndRead(t *testing.T) {
	dir := t.TempDir()
	j := openTestJournal(t, dir)
	if err := j.Start("poison"); err != nil {
		t.Fatal(err)
	}
	j = crashAndReopen(t, j, dir)
	ev := &fakeEvents{sent: map[string][][]byte{}, subs: map[string]chan mq.Event{}}
	ev.setDown(true)
	f := NewFleet(FleetConfig{Events: ev, Reporter: "replica-a", Now: time.Now, Logger: discard()}, j, []string{"tasks.mlp", strings.Repeat("x", 250)})
	if f == nil || len(f.channels) != 1 || f.channels[0] != "tasks.mlp.crashes" {
		t.Fatalf("channels %v, want tasks.mlp.crashes alone (the other name is too long)", f.channels)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.Run(ctx) }()
	if got := f.Crashes("poison", j.Crashes("poison")); got != 1 {
		t.Errorf("with the events store away: %d, want the journal's 1", got)
	}
	if f.HoldFor() != DefaultHold {
		t.Error("does not hold before it has read the channel up to its own report")
	}
	ev.setDown(false)
	deadline := time.Now().Add(10 * time.Second)
	for f.HoldFor() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if f.HoldFor() != 0 {
		t.Error("holds with no other replica heard of, own report read back")
	}
	other := report(journalB, incarn1, "poison", 2)
	body, _ := other.Encode()
	_ = ev.SendEventStore(ctx, "tasks.mlp.crashes", body, nil)
	_ = ev.SendEventStore(ctx, "tasks.mlp.crashes", body, nil) // delivered twice
	_ = ev.SendEventStore(ctx, "tasks.mlp.crashes", []byte(`{"v":1,"journal":"`+journalC+`","crashes":[{"token":"\"poison\"","n":1000}]}`), nil)
	deadline = time.Now().Add(10 * time.Second)
	for (f.Crashes("poison", 1) != 3 || len(ev.sentOn("tasks.mlp.crashes")) < 4) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.Crashes("poison", 1); got != 3 {
		t.Errorf("fleet count %d, want 3 (own 1 + B's 2; the forged report refused)", got)
	}
	own := ev.sentOn("tasks.mlp.crashes")
	if len(own) != 4 {
		t.Fatalf("%d events on the channel, want 4", len(own))
	}
	if r, err := DecodeReport(own[0]); err != nil || r.Journal != j.ID() || len(r.Crashes) != 1 || r.Crashes[0].N != 1 || r.Reporter != "replica-a" {
		t.Errorf("own report %+v, %v", r, err)
	}
	if f.HoldFor() != DefaultHold {
		t.Errorf("hold %v with a peer, want %v", f.HoldFor(), DefaultHold)
	}
	cancel()
	wg.Wait()
}

func (f *fakeEvents) sentOn(ch string) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.sent[ch]...)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
