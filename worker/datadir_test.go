package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferq/inferq/broker"
	"github.com/inferq/inferq/broker/brokertest"
	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/datadir"
	"github.com/inferq/inferq/mq"
)

// Two workers on one data_dir would overwrite each other's spool files:
// the second is refused with an error naming the directory, before it
// dials or opens anything; once the first stops, the directory is free.
func TestWorkerDataDirIsExclusive(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	dir := t.TempDir()
	cfg := func(id string) Config {
		return Config{
			Broker:   mq.Config{Address: srv.Addr, ClientID: id},
			Models:   []consumer.Model{mlpModel("mlp", nil)},
			DataDir:  dir,
			Consumer: consumer.Config{Worker: id, IntakeWorkers: 1, Writers: 1, DrainTimeout: time.Second},
		}
	}
	first, err := New(context.Background(), cfg("first"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := New(context.Background(), cfg("second"))
	if err == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = second.Run(ctx)
		t.Fatal("a second worker opened the data_dir the first holds")
	}
	if !errors.Is(err, datadir.ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second worker: %v, want datadir.ErrLocked naming %s", err, dir)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := first.Run(ctx); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	third, err := New(context.Background(), cfg("third"))
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	if err := third.Run(ctx); err != nil {
		t.Fatalf("third worker: %v", err)
	}
}

// A New that fails after taking the data_dir releases it (and what else it
// built) instead of panicking on its nil result.
func TestWorkerNewFailureReleasesDataDir(t *testing.T) {
	srv := brokertest.NewServer(t, broker.Options{PollWaitFloor: 20 * time.Millisecond, SecondLength: 20 * time.Millisecond})
	dir := t.TempDir()
	blocker := filepath.Join(dir, "journal")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil { // the journal's dir cannot be made
		t.Fatal(err)
	}
	cfg := Config{
		Broker:   mq.Config{Address: srv.Addr, ClientID: "failing"},
		Models:   []consumer.Model{mlpModel("mlp", nil)},
		DataDir:  dir,
		Consumer: consumer.Config{Worker: "failing", IntakeWorkers: 1, Writers: 1, DrainTimeout: time.Second},
	}
	if _, err := New(context.Background(), cfg); err == nil {
		t.Fatal("New with a file where the journal dir goes: no error")
	}
	l, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatalf("the failed New kept the data_dir: %v", err)
	}
	_ = l.Release()
}
