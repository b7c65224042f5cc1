package broker

import (
	"bytes"
	"testing"

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
		n, err := walScan(data, func(typ byte, p []byte) error {
			if len(p) > len(data) {
				t.Fatalf("payload of %d bytes from %d bytes of data", len(p), len(data))
			}
			return nil
		})
		if err != nil || n > len(data) {
			t.Fatalf("scan read %d of %d bytes: %v", n, len(data), err)
		}
		st := newState()
		_, _ = walScan(data, st.apply) // an intact record with a bad payload is an error, not a panic

		rec := walAppend(nil, recGone, func(b []byte) []byte { return append(b, payload...) })
		typ, got, size, err := walDecode(append(rec, data...))
		if err != nil || typ != recGone || size != len(rec) || !bytes.Equal(got, payload) {
			t.Fatalf("round trip of %x: type %d payload %x size %d err %v", payload, typ, got, size, err)
		}
		if len(rec) > walHeader {
			torn := rec[:len(rec)-1]
			if _, _, _, err := walDecode(torn); err == nil {
				t.Fatalf("a record cut short decoded")
			}
		}
	})
}
