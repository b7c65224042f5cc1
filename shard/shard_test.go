package shard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inferq/inferq/mq"
)

func TestOwned(t *testing.T) {
	for _, tc := range []struct {
		self    string
		members []string
		n       int
		want    []int
	}{
		{"a", []string{"a"}, 1, []int{0}},
		{"a", []string{"a"}, 4, []int{0, 1, 2, 3}},
		{"a", []string{"b", "a"}, 4, []int{0, 2}},
		{"b", []string{"b", "a"}, 4, []int{1, 3}},
		{"c", []string{"a", "b", "c"}, 2, nil}, // more members than shards
		{"c", []string{"a", "b", "c", "c"}, 6, []int{2, 5}},
		{"x", []string{"a", "b"}, 4, nil}, // not a member
		{"a", nil, 4, nil},
	} {
		if got := Owned(tc.self, tc.members, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Owned(%q, %v, %d) = %v, want %v", tc.self, tc.members, tc.n, got, tc.want)
		}
	}
	// Every shard has exactly one owner whatever the order members are seen in.
	members := []string{"r2", "r0", "r1"}
	owners := map[int]int{}
	for _, m := range members {
		for _, i := range Owned(m, members, 8) {
			owners[i]++
		}
	}
	for i := range 8 {
		if owners[i] != 1 {
			t.Errorf("shard %d has %d owners", i, owners[i])
		}
	}
}

func TestChannelsAndPick(t *testing.T) {
	if got := Channels("tasks", 3); !slices.Equal(got, []string{"tasks", "tasks.shard-1", "tasks.shard-2"}) {
		t.Errorf("Channels = %v", got)
	}
	counts := make([]int, 4)
	for i := range 4000 {
		k := Pick(fmt.Sprintf("task-%d", i), 4)
		if k != Pick(fmt.Sprintf("task-%d", i), 4) {
			t.Fatal("Pick not deterministic")
		}
		counts[k]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("shard %d got %d of 4000", i, c)
		}
	}
	if Pick("x", 1) != 0 || Pick("x", 0) != 0 {
		t.Error("one shard: not 0")
	}
	for _, n := range []int{0, -1, Max + 1} {
		if Validate(n) == nil {
			t.Errorf("Validate(%d) passed", n)
		}
	}
}

// bus is an in-memory plain events channel.
type bus struct {
	mu   sync.Mutex
	subs map[string][]chan mq.Event
	down bool
}

func (b *bus) SendEvent(_ context.Context, ch string, body []byte, tags map[string]string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return io.ErrClosedPipe
	}
	for _, s := range b.subs[ch] {
		select {
		case s <- mq.Event{Channel: ch, Body: body, Tags: tags}:
		default:
		}
	}
	return nil
}

func (b *bus) SubscribeEvents(ctx context.Context, ch, _ string) (<-chan mq.Event, error) {
	out := make(chan mq.Event, 64)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[string][]chan mq.Event{}
	}
	b.subs[ch] = append(b.subs[ch], out)
	b.mu.Unlock()
	go func() {
		<-ctx.Done()
		b.mu.Lock()
		defer b.mu.Unlock()
		i := slices.Index(b.subs[ch], out)
		b.subs[ch] = slices.Delete(b.subs[ch], i, i+1)
		close(out)
	}()
	return out, nil
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestMembers(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := &bus{}
	beat := 20 * time.Millisecond
	start := func(queue, id string, beat time.Duration) (*Members, func()) {
		m, err := NewMembers(b, queue, id, beat, log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		return m, func() { cancel(); <-done }
	}
	a, stopA := start("q", "a", beat)
	defer stopA()
	if a.Ready() {
		t.Error("ready before listening two beats")
	}
	waitUntil(t, "a ready", a.Ready)
	if got := a.Live(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("alone: %v", got)
	}
	bm, stopB := start("q", "b", beat)
	waitUntil(t, "a and b to see each other", func() bool {
		return slices.Equal(a.Live(), []string{"a", "b"}) && slices.Equal(bm.Live(), []string{"a", "b"})
	})
	stopB()
	waitUntil(t, "b gone", func() bool { return slices.Equal(a.Live(), []string{"a"}) })
	// A leaving member is gone at once: with an hour's beat, no expiry can
	// explain it. (b2's first beat reaches the already subscribed a2.)
	a2, stopA2 := start("q2", "a", time.Hour)
	defer stopA2()
	waitUntil(t, "a2 subscribed", func() bool { a2.mu.Lock(); defer a2.mu.Unlock(); return !a2.started.IsZero() })
	_, stopB2 := start("q2", "b", time.Hour)
	waitUntil(t, "a2 to see b2", func() bool { return slices.Equal(a2.Live(), []string{"a", "b"}) })
	stopB2()
	waitUntil(t, "b2 gone on its leaving", func() bool { return slices.Equal(a2.Live(), []string{"a"}) })
	// A member that stops beating without leaving (SIGKILL) expires.
	c, err := NewMembers(b, "q", "c", beat, log)
	if err != nil {
		t.Fatal(err)
	}
	c.send(context.Background(), false)
	waitUntil(t, "c seen", func() bool { return slices.Equal(a.Live(), []string{"a", "c"}) })
	waitUntil(t, "c expired", func() bool { return slices.Equal(a.Live(), []string{"a"}) })
	if _, err := NewMembers(b, "q", "bad id", beat, log); err == nil {
		t.Error("bad id accepted")
	}
}

func FuzzDecodeBeat(f *testing.F) {
	f.Add([]byte("replica-1"), "1")
	f.Add([]byte(""), "")
	f.Add([]byte("a b"), "0")
	f.Fuzz(func(t *testing.T, body []byte, leaving string) {
		id, l, err := DecodeBeat(body, map[string]string{TagLeaving: leaving})
		if err != nil {
			return
		}
		if validID(id) != nil || id != string(body) || l != (leaving == "1") {
			t.Fatalf("DecodeBeat(%q, %q) = %q %v", body, leaving, id, l)
		}
	})
}
