package client

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/inferq/inferq/task"
)

func rec(id string) *task.Record { return &task.Record{TaskID: id, Status: task.StatusSuccess} }

func TestTableLowWaterAndDedup(t *testing.T) {
	tab := newTable(2, 4, time.Minute)
	now := time.Now()
	tab.expect("a", "b")
	tab.seen(1) // the probe
	if got := tab.lowWater(); got != 1 {
		t.Fatalf("low water %d, want 1", got)
	}
	tab.put("a", rec("a"), 2, now)
	tab.put("b", rec("b"), 3, now)
	tab.put("a", rec("a"), 4, now) // duplicate of a held record
	if got := tab.lowWater(); got != 1 {
		t.Fatalf("low water with a and b held: %d, want 1", got)
	}
	if r, err := tab.take("b"); err != nil || r == nil {
		t.Fatalf("take b: %v %v", r, err)
	}
	if got := tab.lowWater(); got != 1 {
		t.Fatalf("low water with a held: %d, want 1", got)
	}
	if r, _ := tab.take("a"); r == nil {
		t.Fatal("a not held")
	}
	if got := tab.lowWater(); got != 4 {
		t.Fatalf("low water with nothing held: %d, want 4", got)
	}
	if tab.put("a", rec("a"), 5, now) || tab.dups != 2 {
		t.Errorf("duplicate after hand-out kept (dups %d)", tab.dups)
	}
	if _, err := tab.take("a"); !errors.Is(err, ErrReturned) {
		t.Errorf("take after hand-out: %v", err)
	}
	// The done ring forgets the oldest ids beyond its size.
	tab.forget("c", "d", "e", "f")
	if _, _, done := tab.state("a"); done {
		t.Error("a still in a full done ring of 4")
	}
}

func TestTableStraysBoundedAndExpire(t *testing.T) {
	tab := newTable(2, 16, time.Minute)
	t0 := time.Now()
	tab.expect("mine")
	tab.put("mine", rec("mine"), 1, t0)
	for i := range 4 {
		tab.put(fmt.Sprint("old", i), rec("x"), uint64(2+i), t0)
	}
	s := tab.stats()
	if s.Unclaimed != 3 || s.Evicted != 2 {
		t.Fatalf("stats %+v: want the expected record and 2 strays kept", s)
	}
	if _, _, done := tab.state("old0"); done {
		t.Error("an evicted stray counts as handed out")
	}
	if r, _ := tab.take("old3"); r == nil {
		t.Error("newest stray evicted")
	}
	tab.expire(t0.Add(2 * time.Minute))
	if s := tab.stats(); s.Unclaimed != 1 || s.Evicted != 3 {
		t.Fatalf("after the TTL: %+v", s)
	}
	// The expected record pins the low-water mark; the TTL does not touch it.
	if got := tab.lowWater(); got != 0 {
		t.Errorf("low water %d, want 0", got)
	}
	tab.forget("mine")
	if got := tab.lowWater(); got != 5 {
		t.Errorf("low water %d, want 5", got)
	}
}

func TestTableWaiters(t *testing.T) {
	tab := newTable(10, 16, time.Minute)
	e, r, err := tab.register("a")
	if r != nil || err != nil {
		t.Fatal(r, err)
	}
	e2, _, _ := tab.register("a")
	if e != e2 {
		t.Fatal("two entries for one id")
	}
	if got := tab.unregister(e2); got != nil {
		t.Fatal("record before it came")
	}
	tab.put("a", rec("a"), 1, time.Now())
	select {
	case <-e.arrived:
	default:
		t.Fatal("waiter not woken")
	}
	if e.rec == nil || tab.stats().Unclaimed != 0 {
		t.Error("record for a waiter kept in the table")
	}
	// A waiter that gives up leaves nothing behind.
	e, _, _ = tab.register("b")
	tab.unregister(e)
	if len(tab.entries) != 0 {
		t.Errorf("entries left: %v", tab.entries)
	}
	// A failed send leaves nothing behind either.
	tab.expect("c")
	tab.unexpect("c")
	if len(tab.entries) != 0 {
		t.Errorf("entries left: %v", tab.entries)
	}
}

func TestCursorFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	if _, ok, err := readCursor(path); ok || err != nil {
		t.Fatalf("missing file: %v %v", ok, err)
	}
	if err := writeCursor(path, 42); err != nil {
		t.Fatal(err)
	}
	if seq, ok, err := readCursor(path); seq != 42 || !ok || err != nil {
		t.Fatalf("read back %d %v %v", seq, ok, err)
	}
	if err := writeCursor(filepath.Join(path, "sub"), 1); err == nil {
		t.Error("write under a file succeeded")
	}
}
