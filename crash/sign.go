package crash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Crash reports are signed with a fleet key (FleetConfig.Key) shared by
// the replicas of a queue: anyone may publish on <queue>.crashes (KubeMQ
// community has no per-channel access control; message ids are
// predictable from one's own send), so without a signature a forged
// report spends other producers' tasks' crash budgets and sends them to
// the dead letter queue unrun.
//
// A signature is HMAC-SHA256 under the key over signedBytes: a domain
// string, the channel the report is published on (so it cannot be moved
// to another queue's), every field of the report in order with its length,
// and the time it was signed (Report.At), so that a report captured from
// the channel cannot be replayed past the window: a report signed longer
// than FleetConfig.Window ago, or more than maxClockSkew ahead of the
// reader's clock, is stale.

// MinKeyBytes is the shortest fleet key CheckKey accepts.
const MinKeyBytes = 16

// maxClockSkew is how far ahead of the reader's clock a report's signing
// time may be.
const maxClockSkew = time.Minute

// signedDomain starts the signed bytes: a signature of anything else
// under the same key cannot pass for a crash report's.
const signedDomain = "inferq crash report v1\x00"

// The reasons a fleet with a key refuses a report (FleetConfig.Refused):
// the values of inferq_crash_reports_refused_total's reason label.
const (
	RefusedMalformed = "malformed" // DecodeReport refused it
	RefusedUnsigned  = "unsigned"  // no signature
	RefusedForged    = "forged"    // a signature that is not the key's over this report on this channel
	RefusedStale     = "stale"     // signed outside the window: a replay
)

// RefusedReasons are the refusal reasons, for a metric's labels.
func RefusedReasons() []string {
	return []string{RefusedMalformed, RefusedUnsigned, RefusedForged, RefusedStale}
}

// Verify's errors, matched with errors.Is.
var (
	ErrUnsigned = errors.New("crash report not signed")
	ErrForged   = errors.New("crash report signature does not match the fleet key")
	ErrStale    = errors.New("crash report signed outside the window")
)

// CheckKey refuses a fleet key shorter than MinKeyBytes.
func CheckKey(key []byte) error {
	if len(key) < MinKeyBytes {
		return fmt.Errorf("crash: the fleet key is %d bytes; want at least %d (random, e.g. openssl rand -hex 32)", len(key), MinKeyBytes)
	}
	return nil
}

// MaxKeyFileBytes bounds a fleet key file: a key is a short random
// string, so anything larger is not one.
const MaxKeyFileBytes = 4096

// ReadKeyFile reads the fleet key from the file at path (a mounted
// Secret: its files are symlinks into the volume's ..data directory, and
// they are followed): at most MaxKeyFileBytes, trimmed, checked by
// CheckKey. Errors never show the file's content; the caller names the
// path.
func ReadKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Unwrap(err) // the path is in the caller's message
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", errors.Unwrap(err))
	}
	if len(b) > MaxKeyFileBytes {
		return nil, fmt.Errorf("over %d bytes: not a key", MaxKeyFileBytes)
	}
	key := []byte(strings.TrimSpace(string(b)))
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	return key, nil
}

// Sign returns r signed with key for channel at time at: At set to at (in
// milliseconds) and Sig to the signature.
func (r Report) Sign(key []byte, channel string, at time.Time) Report {
	r.At = max(at.UnixMilli(), 1)
	r.Sig = hex.EncodeToString(r.mac(key, channel))
	return r
}

// SignedAt is when r was signed; the zero time when it is not.
func (r Report) SignedAt() time.Time {
	if r.At == 0 {
		return time.Time{}
	}
	return time.UnixMilli(r.At)
}

// Verify checks that r was signed with key for channel within window
// before now (and no more than maxClockSkew after it): ErrUnsigned,
// ErrForged or ErrStale otherwise. The signature is compared in constant
// time.
func (r Report) Verify(key []byte, channel string, now time.Time, window time.Duration) error {
	if r.Sig == "" {
		return ErrUnsigned
	}
	sig, err := hex.DecodeString(r.Sig)
	if err != nil || !hmac.Equal(sig, r.mac(key, channel)) {
		return ErrForged
	}
	at := r.SignedAt()
	if age := now.Sub(at); age > window || age < -maxClockSkew {
		return fmt.Errorf("%w: signed at %s, %v from now, window %v", ErrStale, at.UTC().Format(time.RFC3339), -age.Round(time.Second), window)
	}
	return nil
}

// mac is the HMAC-SHA256 of r's signed bytes on channel under key.
func (r Report) mac(key []byte, channel string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(r.signedBytes(channel))
	return m.Sum(nil)
}

// signedBytes is what a signature covers: signedDomain, then channel and
// every field but Sig, each string preceded by its length and each number
// fixed-width, so that no two reports (or channels) share them.
func (r Report) signedBytes(channel string) []byte {
	b := []byte(signedDomain)
	str := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(n int64) { b = binary.BigEndian.AppendUint64(b, uint64(n)) }
	str(channel)
	num(int64(r.V))
	str(r.Journal)
	str(r.Incarnation)
	str(r.Reporter)
	num(r.At)
	num(int64(len(r.Crashes)))
	for _, c := range r.Crashes {
		str(c.Token)
		num(int64(c.N))
	}
	return b
}

// refusal is the reason label of a refused report's error.
func refusal(err error) string {
	switch {
	case errors.Is(err, ErrUnsigned):
		return RefusedUnsigned
	case errors.Is(err, ErrForged):
		return RefusedForged
	case errors.Is(err, ErrStale):
		return RefusedStale
	}
	return RefusedMalformed
}
