package broker_test

// Tests of a data dir on a disk that fails (issue 27 item 5): a full disk
// refuses sends, and a restart works once there is room again.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/inferq/inferq/broker"
	pb "github.com/kubemq-io/protobuf/go"
)

// TestDataDirFullDiskRefusesSends: once the data dir's log cannot write
// (ENOSPC), queue sends and events store sends are refused, naming the
// disk's error, and what was refused is not delivered from memory; a
// restart once the disk has room again has everything acknowledged before,
// and takes sends again.
func TestDataDirFullDiskRefusesSends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var full atomic.Bool
	srv, c := openData(t, dir, func(o *broker.Options) {
		broker.SetDiskFault(o, func(op, path string) error {
			if full.Load() && (op == "write" || op == "sync") {
				return syscall.ENOSPC
			}
			return nil
		})
	})
	ctx := context.Background()
	rawSend(t, c, ch1, "before")
	full.Store(true)
	for _, body := range []string{"during1", "during2"} {
		res, err := c.SendQueueMessage(ctx, &pb.QueueMessage{ClientID: "raw", Channel: ch1, Body: []byte(body)})
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		if !res.IsError || !strings.Contains(res.Error, "refused") || !strings.Contains(res.Error, "no space left on device") ||
			strings.Contains(res.Error, "memory only") {
			t.Errorf("send %s on a full disk = %+v, want refused with the disk's error", body, res)
		}
	}
	batch, err := c.SendQueueMessagesBatch(ctx, &pb.QueueMessagesBatchRequest{Messages: []*pb.QueueMessage{{ClientID: "raw", Channel: ch1, Body: []byte("during3")}}})
	if err != nil || !batch.HaveErrors || !strings.Contains(batch.Results[0].Error, "refused") {
		t.Errorf("batch send on a full disk = %v %+v, want refused", err, batch)
	}
	if _, err := c.SendEvent(ctx, &pb.Event{ClientID: "raw", Channel: "ev", Body: []byte("e"), Store: true}); err == nil ||
		!strings.Contains(err.Error(), "refused") {
		t.Errorf("events store send on a full disk = %v, want refused", err)
	}
	if got := waitingBodies(srv, ch1); !slices.Equal(got, []string{"before"}) {
		t.Errorf("waiting on a full disk = %v, want only [before]", got)
	}
	srv.Close()

	full.Store(false) // room again
	srv, c = openData(t, dir, nil)
	if got := waitingBodies(srv, ch1); !slices.Equal(got, []string{"before"}) {
		t.Errorf("waiting after the restart = %v, want [before]", got)
	}
	rawSend(t, c, ch1, "after")
	if got := waitingBodies(srv, ch1); !slices.Equal(got, []string{"before", "after"}) {
		t.Errorf("waiting = %v, want [before after]", got)
	}
}

// TestDataDirSnapshotOnFullDisk: a start whose snapshot cannot be written
// (the disk has room for the log, not for a copy of the data) serves from
// the files it found, leaves no partial snapshot behind, and a later start
// with room compacts them.
func TestDataDirSnapshotOnFullDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, c := openData(t, dir, nil)
	rawSend(t, c, ch1, "a", "b")
	srv.Close()

	noRoomForSnapshots := func(o *broker.Options) {
		broker.SetDiskFault(o, func(op, path string) error {
			if op == "write" && strings.HasPrefix(filepath.Base(path), "snap-") {
				return syscall.ENOSPC
			}
			return nil
		})
	}
	srv, c = openData(t, dir, noRoomForSnapshots)
	if got := waitingBodies(srv, ch1); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("waiting = %v, want [a b]", got)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "snap-*.tmp")); len(tmps) > 0 {
		t.Errorf("a failed snapshot left %v", tmps)
	}
	rawSend(t, c, ch1, "c")
	srv.Close()

	srv, _ = openData(t, dir, nil)
	if got := waitingBodies(srv, ch1); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("waiting after a start with room = %v, want [a b c]", got)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*"))
	if len(snaps) != 1 || strings.HasSuffix(snaps[0], ".tmp") {
		t.Errorf("snapshots = %v, want one", snaps)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// TestDataDirPrepareOnFullDisk: when the next segment cannot be zero-filled
// ahead (no room), nothing of it is left, and the log goes on in a segment
// it creates when the current one is full.
func TestDataDirPrepareOnFullDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var failed atomic.Bool
	small := func(o *broker.Options) {
		o.SegmentBytes = 16 << 10
		broker.SetDiskFault(o, func(op, path string) error {
			// The first write of segment 2 is its zero-filling.
			if op == "write" && filepath.Base(path) == "wal-0000000000000002.log" && failed.CompareAndSwap(false, true) {
				return syscall.ENOSPC
			}
			return nil
		})
	}
	srv, c := openData(t, dir, small)
	var want []string
	for i := range 40 {
		b := fmt.Sprintf("m%03d-%s", i, strings.Repeat("x", 1000))
		rawSend(t, c, ch1, b)
		want = append(want, b)
	}
	if !failed.Load() {
		t.Fatal("segment 2 was never prepared")
	}
	srv.Close()
	srv, _ = openData(t, dir, nil)
	if got := waitingBodies(srv, ch1); !slices.Equal(got, want) {
		t.Errorf("after a failed preparation: %d messages, want %d", len(got), len(want))
	}
}
