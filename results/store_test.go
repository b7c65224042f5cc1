package results

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPutReplyTo(t *testing.T) {
	fb := newFakeBroker()
	s := newStore(t, testConfig(fb))
	body := rec("t1", "SUCCESS")
	if err := s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body, ReplyTo: "replies.p1"}); err != nil {
		t.Fatal(err)
	}
	fb.get(func(f *fakeBroker) {
		evs := f.events["replies.p1"]
		if len(evs) != 1 || string(evs[0].body) != string(body) {
			t.Fatalf("events = %v, want one with the record", evs)
		}
		if evs[0].tags["task_id"] != "t1" || evs[0].tags["status"] != "SUCCESS" {
			t.Errorf("tags = %v", evs[0].tags)
		}
		if len(f.queues) != 0 {
			t.Errorf("queue writes on the reply path: %v", f.queues)
		}
	})
	if got, ok := s.Get("t1"); !ok || string(got) != string(body) {
		t.Errorf("Get = %q, %v", got, ok)
	}
}

func TestPutCompat(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const ch = "rayserve-result-t1"
	tests := []struct {
		name        string
		pending     bool          // the producer wrote a PENDING
		createdAgo  time.Duration // task created_at before now; 0 = unknown
		wantReceive bool
		stillLive   bool // the PENDING stays ahead of the record until it expires
	}{
		{name: "pending present", pending: true, createdAgo: time.Minute, wantReceive: true},
		{name: "no old record", pending: false, createdAgo: time.Minute, wantReceive: true},
		{name: "created_at unknown", pending: true, wantReceive: true},
		{name: "pending expired", pending: true, createdAgo: 2 * time.Hour, wantReceive: false},
		{name: "pending expires within the margin", pending: true, createdAgo: time.Hour - 30*time.Second, wantReceive: false, stillLive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBroker()
			fb.now = func() time.Time { return now }
			created := time.Time{}
			if tt.createdAgo > 0 {
				created = now.Add(-tt.createdAgo)
			}
			if tt.pending {
				at := now.Add(-tt.createdAgo)
				fb.put(ch, "PENDING", at.Add(time.Hour))
			}
			cfg := testConfig(fb)
			cfg.Now = fb.now
			s := newStore(t, cfg)
			body := rec("t1", "SUCCESS")
			err := s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body, CreatedAt: created})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{string(body)}
			if tt.stillLive {
				want = append([]string{"PENDING"}, want...)
			}
			if got := fb.queue(ch); !slices.Equal(got, want) {
				t.Errorf("channel = %q, want %q", got, want)
			}
			if tt.stillLive {
				now = now.Add(31 * time.Second)
				if got := fb.queue(ch); !slices.Equal(got, []string{string(body)}) {
					t.Errorf("after the PENDING expired channel = %q, want only the new record", got)
				}
			}
			if got := len(fb.opsOf("remove ")) > 0; got != tt.wantReceive {
				t.Errorf("removal issued = %v, want %v", got, tt.wantReceive)
			}
			fb.get(func(f *fakeBroker) {
				if f.swallowed != 0 {
					t.Errorf("%d records swallowed (trap 8)", f.swallowed)
				}
				if ops := f.ops; ops[0] != "send "+ch {
					t.Errorf("first op %q, want the send before any removal", ops[0])
				}
				// A removal that finds the channel empty waits out the
				// broker's 1 s floor, and the task's batch with it: never,
				// as the record is sent first.
				if f.emptyWaits != 0 {
					t.Errorf("%d removals met an empty channel", f.emptyWaits)
				}
			})
		})
	}
}

// TestFakeModelsTrap8 checks the fake the compat tests rely on: a removal
// that meets only an expired record loses the next record.
func TestFakeModelsTrap8(t *testing.T) {
	fb := newFakeBroker()
	fb.put("c", "PENDING", time.Now().Add(-time.Second))
	if old, _, _ := fb.RemoveOld(context.Background(), "c", time.Second, "w", 1); old != OldNone {
		t.Fatalf("found an expired record: %v", old)
	}
	_ = fb.SendQueue(context.Background(), "c", []byte("SUCCESS"), time.Hour, "w")
	if got := fb.queue("c"); len(got) != 0 {
		t.Fatalf("channel = %q, want the record swallowed", got)
	}
}

func TestPutCompatNonTerminal(t *testing.T) {
	fb := newFakeBroker()
	s := newStore(t, testConfig(fb))
	ctx := context.Background()
	put := func(status string, terminal bool) {
		t.Helper()
		if err := s.Put(ctx, Entry{TaskID: "t1", Status: status, Terminal: terminal, Body: rec("t1", status)}); err != nil {
			t.Fatal(err)
		}
	}
	put("STARTED", false)
	if ops := fb.opsOf(""); len(ops) != 0 {
		t.Fatalf("non-terminal record reached the broker: %v", ops)
	}
	if got, _ := s.Get("t1"); !strings.Contains(string(got), "STARTED") {
		t.Errorf("Get = %s, want STARTED", got)
	}
	put("SUCCESS", true)
	put("STARTED", false) // late: must not hide the terminal record
	if got, _ := s.Get("t1"); !strings.Contains(string(got), "SUCCESS") {
		t.Errorf("Get = %s, want SUCCESS", got)
	}
}

func TestPutRetries(t *testing.T) {
	tests := []struct {
		name        string
		failNext    int
		down        bool
		replyTo     string
		wantRetries uint64
		wantPending int
	}{
		{name: "reply, two failures", failNext: 2, replyTo: "r", wantRetries: 2},
		{name: "compat, removal then send fail", failNext: 2, wantRetries: 2},
		{name: "reply, broker down", down: true, replyTo: "r", wantRetries: 3, wantPending: 1},
		{name: "compat, broker down", down: true, wantRetries: 3, wantPending: 1},
		{name: "three failures then success", failNext: 3, replyTo: "r", wantRetries: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBroker()
			fb.failNext, fb.down = tt.failNext, tt.down
			s := newStore(t, testConfig(fb))
			body := rec("t1", "SUCCESS")
			if err := s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body, ReplyTo: tt.replyTo}); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if st.Retries != tt.wantRetries || st.Pending != tt.wantPending {
				t.Errorf("retries %d pending %d, want %d %d", st.Retries, st.Pending, tt.wantRetries, tt.wantPending)
			}
			if got, ok := s.Get("t1"); !ok || string(got) != string(body) {
				t.Errorf("Get = %q %v", got, ok)
			}
		})
	}
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	fb := newFakeBroker()
	fb.failWith = errTooLarge
	s := newStore(t, testConfig(fb))
	runStore(t, s)
	body := rec("t1", "SUCCESS")
	if err := s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body, ReplyTo: "r"}); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Retries != 0 || st.Parked != 1 || st.Undeliverable != 1 || st.Held != 0 || st.Pending != 0 {
		t.Errorf("stats %+v, want no retries, one undeliverable", st)
	}
	if got, ok := s.Get("t1"); !ok || string(got) != string(body) {
		t.Errorf("Get = %q %v", got, ok)
	}
	if n := len(fb.opsOf("event ")); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
}

func TestCancelMidRetrySpools(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	ctx, cancel := context.WithCancel(context.Background())
	fb.onCall = cancel // shutdown arrives during the first attempt
	cfg := testConfig(fb)
	cfg.RetryBackoff = time.Hour
	dir := t.TempDir()
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s := newStore(t, cfg)
	body := rec("t1", "SUCCESS")
	if err := s.Put(ctx, Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body}); err != nil {
		t.Fatalf("Put after cancel = %v, want nil (spooled)", err)
	}
	if st := s.Stats(); st.Pending != 1 {
		t.Fatalf("pending = %d, want 1", st.Pending)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Put(context.Background(), Entry{TaskID: "t2", Terminal: true, Body: body}); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
	fb2 := newFakeBroker()
	cfg2 := testConfig(fb2)
	cfg2.DataDir, cfg2.MemoryOnly = dir, false
	s2 := newStore(t, cfg2)
	if got, ok := s2.Get("t1"); !ok || string(got) != string(body) {
		t.Errorf("after restart Get = %q %v", got, ok)
	}
}

func TestCloseWithoutDataDirReportsLoss(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	s := newStore(t, testConfig(fb))
	_ = s.Put(context.Background(), Entry{TaskID: "t1", Terminal: true, Body: rec("t1", "SUCCESS")})
	if err := s.Close(context.Background()); !errors.Is(err, ErrNotFlushed) {
		t.Errorf("Close = %v, want ErrNotFlushed", err)
	}
}

func TestInvalid(t *testing.T) {
	s := newStore(t, Config{Broker: newFakeBroker(), MemoryOnly: true, MaxResultBytes: 8})
	for _, e := range []Entry{
		{Body: []byte("x")},
		{TaskID: "t"},
		{TaskID: "t", Body: []byte("0123456789")},
		{TaskID: "t", Body: []byte("0123456789"), Substitute: []byte("0123456789")},
	} {
		if err := s.Put(context.Background(), e); !errors.Is(err, ErrInvalidEntry) {
			t.Errorf("Put(%v) = %v, want ErrInvalidEntry", e, err)
		}
	}
	for _, c := range []Config{
		{},
		{Broker: newFakeBroker()}, // memory-only must be chosen
		{Broker: newFakeBroker(), MemoryOnly: true, DataDir: t.TempDir()},
		{Broker: newFakeBroker(), MemoryOnly: true, Expiry: time.Millisecond},
		{Broker: newFakeBroker(), MemoryOnly: true, ExpiryMargin: 2 * time.Hour},
		{Broker: newFakeBroker(), MemoryOnly: true, ReplayBackoff: time.Minute, ReplayBackoffMax: time.Second},
		{Broker: newFakeBroker(), MemoryOnly: true, RemoveConcurrency: -1},
	} {
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
}

// TestOutageWarningsAreRateLimited: while the broker is away every record
// retries and spools, and the replay keeps failing; each of those warnings
// is logged once per LogRepeatEvery, not once per record or retry, and the
// replay's are logged again from the start of the next outage.
func TestOutageWarningsAreRateLimited(t *testing.T) {
	fb := newFakeBroker()
	fb.down = true
	var logs logBuf
	cfg := testConfig(fb)
	cfg.Logger = slogTo(&logs)
	s := newStore(t, cfg)
	for i := range 20 {
		id := fmt.Sprintf("t%d", i)
		if err := s.Put(context.Background(), Entry{TaskID: id, Status: "SUCCESS", Terminal: true, Body: rec(id, "SUCCESS"), ReplyTo: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runStore(t, s)
	waitFor(t, "the replay to fail a few passes", func() bool {
		var n int
		fb.get(func(f *fakeBroker) { n = f.calls })
		return n > 100
	})
	count := func(msg string) int { return strings.Count(logs.String(), `msg="`+msg+`"`) }
	for _, msg := range []string{"result write failed; retrying", "result spooled for replay", msgReplayFailed, msgReplayPaused} {
		if n := count(msg); n != 1 {
			t.Errorf("%q logged %d times during the outage, want 1", msg, n)
		}
	}
	if st := s.Stats(); st.Retries != 60 || st.Pending != 20 {
		t.Errorf("stats %+v, want 60 retries and 20 pending (the counters are not limited)", st)
	}
	fb.set(func(f *fakeBroker) { f.down = false })
	waitFor(t, "the replay to drain", func() bool { return s.Stats().Pending == 0 })
	fb.set(func(f *fakeBroker) { f.down = true })
	if err := s.Put(context.Background(), Entry{TaskID: "late", Status: "SUCCESS", Terminal: true, Body: rec("late", "SUCCESS"), ReplyTo: "r"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second outage's replay failure logged", func() bool { return count(msgReplayFailed) == 2 })
	stop()
}

// TestUndeliverableKeptOnDisk: a record the broker refuses for good on Put
// is kept apart on disk, readable by Get in this process and the next,
// never sent again.
func TestUndeliverableKeptOnDisk(t *testing.T) {
	dir := t.TempDir()
	fb := newFakeBroker()
	fb.failWith = errBadChannel
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s := newStore(t, cfg)
	body := rec("t1", "SUCCESS")
	if err := s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body, ReplyTo: "r"}); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*"+extUndeliverable)); len(files) != 1 {
		t.Fatalf("undeliverable files %v, want 1", files)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fb2 := newFakeBroker()
	cfg.Broker = fb2
	s2 := newStore(t, cfg)
	runStore(t, s2)
	if st := s2.Stats(); st.Undeliverable != 1 || st.Pending != 0 {
		t.Errorf("after restart %+v, want one undeliverable", st)
	}
	if got, ok := s2.Get("t1"); !ok || string(got) != string(body) {
		t.Errorf("after restart Get = %q %v", got, ok)
	}
	putN(t, s2, "other", 1, 0, "r") // a Put wakes the replay
	if ops := fb2.opsOf(""); !slices.Equal(ops, []string{"event r"}) {
		t.Errorf("broker ops %v, want only the other record", ops)
	}
}

// TestMemoryOnlyIsExplicitAndWarned: a store without a data dir must say
// memory-only, and says at start that spooled records die with it.
func TestMemoryOnlyIsExplicitAndWarned(t *testing.T) {
	if _, err := New(Config{Broker: newFakeBroker()}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New without data dir or memory-only = %v, want ErrInvalidConfig", err)
	}
	logs := &logBuf{}
	newStore(t, Config{Broker: newFakeBroker(), MemoryOnly: true, Logger: slogTo(logs)})
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "memory only") {
		t.Errorf("no startup warning for the memory-only spool:\n%s", logs)
	}
}

// What the removal finds at the head of the compat channel decides the
// write: a record ours supersedes is removed first; another writer's final
// record (the producer's CANCELLED) stands and nothing is written behind
// it, the result kept for lookups; a message that is no record stays and
// the record goes behind it. A retry or a replay after a failed send does
// not remove again.
func TestCompatWriteByOldRecord(t *testing.T) {
	for _, tt := range []struct {
		name, head   string // "" for an empty channel
		fail         string // the first call whose op starts with it fails
		want         []string
		wantRemovals int
		wantWithheld uint64
		wantRetries  uint64
	}{
		{name: "empty", want: []string{"R"}, wantRemovals: 1},
		{name: "the producer's PENDING", head: "PENDING", want: []string{"R"}, wantRemovals: 2},
		{name: "the producer's CANCELLED", head: "CANCELLED", want: []string{"CANCELLED", "R"}, wantRemovals: 1, wantWithheld: 1},
		{name: "no record", head: "FOREIGN", want: []string{"FOREIGN", "R"}, wantRemovals: 1},
		{name: "PENDING, the send retried", head: "PENDING", fail: "send ", want: []string{"R"}, wantRemovals: 2, wantRetries: 1},
		// The first try's record is in the channel when its removal fails:
		// the second try's removal takes it with the PENDING.
		{name: "PENDING, the removal retried", head: "PENDING", fail: "remove ", want: []string{"R"}, wantRemovals: 3, wantRetries: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBroker()
			ch := "rayserve-result-t1"
			if tt.head != "" {
				fb.put(ch, tt.head, time.Now().Add(time.Hour))
			}
			s := newStore(t, testConfig(fb))
			if tt.fail != "" {
				failed := false
				fb.onCall = func() {
					fb.mu.Lock()
					defer fb.mu.Unlock()
					// onCall runs before the call notes its op: fail the
					// call after the last op, when that is the one named.
					next := "send "
					if n := len(fb.ops); n > 0 {
						next = "remove "
					}
					if !failed && next == tt.fail {
						failed = true
						fb.failNext = 1
					}
				}
			}
			if err := s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: []byte("R"), CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if got := fb.queue(ch); !slices.Equal(got, tt.want) {
				t.Errorf("channel = %q, want %q", got, tt.want)
			}
			if n := len(fb.opsOf("remove ")); n != tt.wantRemovals {
				t.Errorf("%d removals, want %d (ops %q)", n, tt.wantRemovals, fb.opsOf(""))
			}
			if st := s.Stats(); st.Withheld != tt.wantWithheld || st.Retries != tt.wantRetries {
				t.Errorf("withheld %d, retries %d; want %d, %d", st.Withheld, st.Retries, tt.wantWithheld, tt.wantRetries)
			}
			fb.get(func(f *fakeBroker) {
				if f.emptyWaits != 0 {
					t.Errorf("%d removals met an empty channel (the broker's 1 s floor)", f.emptyWaits)
				}
			})
			if body, ok := s.Get("t1"); !ok || string(body) != "R" {
				t.Errorf("lookup: %q %v, want the result", body, ok)
			}
		})
	}
}
