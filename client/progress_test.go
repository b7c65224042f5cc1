package client_test

import (
	"slices"
	"testing"
	"time"

	"github.com/inferq/inferq/client"
	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

func TestProgress(t *testing.T) {
	srv := fastBroker(t)
	c := newClient(t, srv.Addr, "progress")
	ctx := ctxT(t, 20*time.Second)
	pub, err := mq.Dial(ctx, mq.Config{Address: srv.Addr, ClientID: "publisher"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	send := func(p task.Progress) {
		body, tags := p.Encode()
		if err := pub.SendEvent(ctx, "inferq.mlp"+client.ProgressSuffix, body, tags); err != nil {
			t.Fatal(err)
		}
	}
	one, err := c.Progress(ctx, c.QueueOf("mlp"), "t1")
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Progress(ctx, c.QueueOf("mlp"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Events are not stored: probe until both subscriptions are live.
	live := func(ch <-chan task.Progress) {
		waitFor(t, 10*time.Second, "the progress subscription", func() bool {
			send(task.Progress{TaskID: "t1", Pct: 0, Detail: "probe"})
			select {
			case <-ch:
				return true
			case <-time.After(20 * time.Millisecond):
				return false
			}
		})
	}
	live(one)
	live(all)
	for _, p := range []task.Progress{
		{TaskID: "t2", Pct: 10, Detail: "received"},
		{TaskID: "t1", Pct: 10, Detail: "received"},
		{TaskID: "t1", Pct: 50, Detail: "running: batch of 3"},
		{TaskID: "t1", Pct: 100, Detail: "stored"},
		{TaskID: "t1", Pct: 10, Detail: "after the end"},
	} {
		send(p)
	}
	var got []task.Progress
	for p := range one { // closes after 100%
		if p.Detail != "probe" {
			got = append(got, p)
		}
	}
	want := []task.Progress{{TaskID: "t1", Pct: 10, Detail: "received"}, {TaskID: "t1", Pct: 50, Detail: "running: batch of 3"}, {TaskID: "t1", Pct: 100, Detail: "stored"}}
	if !slices.Equal(got, want) {
		t.Fatalf("progress of t1: %+v, want %+v", got, want)
	}
	seen := map[string]int{}
	waitFor(t, 10*time.Second, "every task's events", func() bool {
		select {
		case p := <-all:
			if p.Detail != "probe" {
				seen[p.TaskID]++
			}
		case <-time.After(10 * time.Millisecond):
		}
		return seen["t1"] == 4 && seen["t2"] == 1
	})
}
