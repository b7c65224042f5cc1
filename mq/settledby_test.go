package mq

import (
	"errors"
	"testing"
)

type recordSettler struct{ got []Settlement }

func (r *recordSettler) Settle(_ *Message, how Settlement, _ string) error {
	r.got = append(r.got, how)
	return nil
}

// A message built by hand settles through its Settler, once, like a
// polled one; without one it cannot be settled.
func TestSettledBy(t *testing.T) {
	if err := (&Message{ID: "x"}).Ack(); !errors.Is(err, ErrNotSettleable) {
		t.Errorf("ack of a message without a settler: %v, want ErrNotSettleable", err)
	}
	r := &recordSettler{}
	for _, settle := range []func(*Message) error{
		(*Message).Ack, (*Message).NAck, func(m *Message) error { return m.ReQueue("elsewhere") }, (*Message).GiveBack,
	} {
		m := (&Message{ID: "m"}).SettledBy(r)
		if err := settle(m); err != nil {
			t.Fatal(err)
		}
		if !m.Settled() {
			t.Error("not settled")
		}
		if err := m.Ack(); !errors.Is(err, ErrAlreadySettled) {
			t.Errorf("second settlement: %v, want ErrAlreadySettled", err)
		}
	}
	want := []Settlement{SettleAck, SettleNAck, SettleReQueue, SettleGiveBack}
	if len(r.got) != len(want) {
		t.Fatalf("settler heard %v, want %v", r.got, want)
	}
	for i := range want {
		if r.got[i] != want[i] {
			t.Errorf("settler heard %v, want %v", r.got, want)
		}
	}
	if err := (&Message{ID: "m"}).SettledBy(r).ReQueue(""); err == nil {
		t.Error("requeue to no channel accepted")
	}
}
