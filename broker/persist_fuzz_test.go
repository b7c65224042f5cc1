package broker

import (
	"bytes"
	"testing"
	"time"

	pb "github.com/kubemq-io/protobuf/go"
)

// FuzzWALDecode feeds arbitrary bytes to the log reader as a segment: it
// must never panic, read past the data or take a record it did not check,
// and what it reads must replay without a panic. A record encoded by
// walAppend must decode back to itself, whatever comes after it.
func FuzzWALDecode(f *testing.F) {
	put := func(b []byte) []byte {
		out, _ := appendProto(append(b, 7), &pb.QueueMessage{MessageID: "m", Channel: "q", Body: []byte("x"), Attributes: &pb.QueueMessageAttributes{ReceiveCount: 2}})
		return out
	}
	var seed []byte
	seed = walAppend(seed, recPut, put)
	seed = walAppend(seed, recRecv, func(b []byte) []byte { return append(b, 7, 3) })
	seed = walAppend(seed, recTail, func(b []byte) []byte { return append(b, 7) })
	seed = walAppend(seed, recGone, func(b []byte) []byte { return append(b, 7) })
	seed = walAppend(seed, recSeq, func(b []byte) []byte { return append(b, 9, 'e') })
	f.Add(seed, []byte("payload"))
	f.Add(seed[:len(seed)-2], []byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0}, []byte{1})
	f.Fuzz(func(t *testing.T, data, payload []byte) {
		var read int64
		n, torn, err := walScan(bytes.NewReader(data), func(typ byte, p []byte) error {
			read += int64(walHeader + 1 + len(p))
			return nil
		})
		if err != nil || n != read || n > int64(len(data)) || (!torn && n != int64(len(data))) {
			t.Fatalf("scan read %d (records %d) of %d bytes, torn %v: %v", n, read, len(data), torn, err)
		}
		st := newState(&Options{EventsStoreMaxEvents: 2, EventsStoreMaxBytes: 64})
		_, _, _ = walScan(bytes.NewReader(data), st.apply) // a bad payload in an intact record is an error, not a panic
		st.bound(time.Now())

		rec := walAppend(nil, recGone, func(b []byte) []byte { return append(b, payload...) })
		var got []byte
		records := 0
		_, _, err = walScan(bytes.NewReader(append(rec, data...)), func(typ byte, p []byte) error {
			if records == 0 {
				if typ != recGone {
					t.Fatalf("type %d, want %d", typ, recGone)
				}
				got = bytes.Clone(p)
			}
			records++
			return nil
		})
		if err != nil || records == 0 || !bytes.Equal(got, payload) {
			t.Fatalf("round trip of %x: got %x (%d records): %v", payload, got, records, err)
		}
		n, torn, _ = walScan(bytes.NewReader(rec[:len(rec)-1]), func(byte, []byte) error { return nil })
		if n != 0 || !torn {
			t.Fatalf("a record cut short: read %d, torn %v", n, torn)
		}
	})
}
