package crash

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/inferq/inferq/task"
)

// Report is a crash report: what a process publishes on Channel(queue) when
// it starts with crash counts in its journal: for each message id (as its
// journal token), how many times processes on that journal died running
// it. Counts are cumulative per journal, so a report may be delivered,
// replayed or published again (by the next process on the same journal)
// any number of times: the fleet keeps the largest count per (journal,
// message), and sums over journals.
type Report struct {
	// V is the format version, reportVersion.
	V int `json:"v"`
	// Journal is the id of the journal whose counts these are
	// (Journal.ID): the key the fleet dedupes on.
	Journal string `json:"journal"`
	// Incarnation is the id of the process that published it (random per
	// process), and Reporter its name (the worker's host name): for logs
	// and operators, not for counting.
	Incarnation string `json:"incarnation"`
	Reporter    string `json:"reporter"`
	// Crashes are the counts, at most reportMaxEntries.
	Crashes []Count `json:"crashes"`
	// At (Unix milliseconds) and Sig (HMAC-SHA256, 64 lowercase hex
	// digits) sign the report with the fleet key (Sign, Verify; sign.go);
	// both are absent from an unsigned report.
	At  int64  `json:"at,omitempty"`
	Sig string `json:"sig,omitempty"`
}

// Count is one message's count in a crash report.
type Count struct {
	// Token is the message id's Token.
	Token string `json:"token"`
	// N is the number of crashes, 1 to reportMaxCount.
	N int `json:"n"`
}

const (
	reportVersion = 1
	// reportMaxBytes bounds an encoded report; a decoder refuses a
	// longer body before parsing it.
	reportMaxBytes = 256 << 10
	// reportMaxEntries bounds the counts in one report (a longer
	// list is sent as several reports): each token is at most ~2 KB
	// quoted, so a report stays under reportMaxBytes.
	reportMaxEntries = 100
	// reportMaxCount bounds one count: a forged report cannot make
	// a sum overflow.
	reportMaxCount = 1 << 20
	// reportMaxReporter bounds the reporter's name.
	reportMaxReporter = 256
)

// ChannelSuffix is appended to a queue's name to name its crash
// report channel (an Events Store channel).
const ChannelSuffix = ".crashes"

// Channel is queue's crash report channel; an error when the name is
// not one task.CheckName accepts (too long with the suffix).
func Channel(queue string) (string, error) {
	ch := queue + ChannelSuffix
	if err := task.CheckName("crash report channel", ch); err != nil {
		return "", err
	}
	return ch, nil
}

// splitReports splits counts into reports of at most
// reportMaxEntries each, all from journal and incarnation. No counts:
// one report without counts (a heartbeat: the journal is there).
func splitReports(journal, incarnation, reporter string, counts map[string]int) []Report {
	var out []Report
	cur := Report{V: reportVersion, Journal: journal, Incarnation: incarnation, Reporter: clipReporter(reporter)}
	for tok, n := range counts {
		if n < 1 {
			continue
		}
		cur.Crashes = append(cur.Crashes, Count{Token: tok, N: min(n, reportMaxCount)})
		if len(cur.Crashes) == reportMaxEntries {
			out = append(out, cur)
			cur.Crashes = nil
		}
	}
	if len(cur.Crashes) > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out
}

// clipReporter makes a host name fit a report: valid UTF-8, at most
// reportMaxReporter bytes.
func clipReporter(s string) string {
	s = string(bytes.ToValidUTF8([]byte(s), []byte("?")))
	for len(s) > reportMaxReporter {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// Encode returns the report's JSON body.
func (r Report) Encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("crash: encode crash report: %w", err)
	}
	return b, nil
}

var errBadReport = errors.New("malformed crash report")

// DecodeReport parses and checks a report's body. Anything but what
// Encode writes for a valid report is refused: an unknown field, a wrong
// version, a journal or incarnation id that is not 32 hex digits, a token
// Token could not have written, a count out of range, a token
// twice, more than reportMaxEntries counts, a signature time without a
// signature or the reverse, a signature that is not 64 lowercase hex
// digits, or a body over reportMaxBytes. It does not check the signature
// (Verify does).
func DecodeReport(body []byte) (Report, error) {
	var r Report
	if len(body) > reportMaxBytes {
		return r, fmt.Errorf("%w: %d bytes, over %d", errBadReport, len(body), reportMaxBytes)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return Report{}, fmt.Errorf("%w: %w", errBadReport, err)
	}
	if d.More() {
		return Report{}, fmt.Errorf("%w: data after the report", errBadReport)
	}
	if err := r.check(); err != nil {
		return Report{}, err
	}
	return r, nil
}

func (r Report) check() error {
	switch {
	case r.V != reportVersion:
		return fmt.Errorf("%w: version %d, want %d", errBadReport, r.V, reportVersion)
	case !isJournalID(r.Journal):
		return fmt.Errorf("%w: journal id %.40q is not %d hex digits", errBadReport, r.Journal, journalIDLen)
	case !isJournalID(r.Incarnation):
		return fmt.Errorf("%w: incarnation %.40q is not %d hex digits", errBadReport, r.Incarnation, journalIDLen)
	case len(r.Reporter) > reportMaxReporter || !utf8.ValidString(r.Reporter):
		return fmt.Errorf("%w: reporter name too long or not UTF-8", errBadReport)
	case len(r.Crashes) > reportMaxEntries:
		return fmt.Errorf("%w: %d counts, over %d", errBadReport, len(r.Crashes), reportMaxEntries)
	case (r.Sig == "") != (r.At == 0) || r.At < 0:
		return fmt.Errorf("%w: a signature needs its time (at > 0) and sig, or neither", errBadReport)
	case r.Sig != "" && !isHex(r.Sig, 2*sha256.Size):
		return fmt.Errorf("%w: sig is not %d lowercase hex digits", errBadReport, 2*sha256.Size)
	}
	seen := make(map[string]bool, len(r.Crashes))
	for i, c := range r.Crashes {
		if tok, rest, ok := parseToken(c.Token); !ok || rest != "" || tok != c.Token {
			return fmt.Errorf("%w: count %d: token %.40q is not a journal token", errBadReport, i, c.Token)
		}
		if c.N < 1 || c.N > reportMaxCount {
			return fmt.Errorf("%w: count %d: %d out of range [1, %d]", errBadReport, i, c.N, reportMaxCount)
		}
		if seen[c.Token] {
			return fmt.Errorf("%w: count %d: token %.40q twice", errBadReport, i, c.Token)
		}
		seen[c.Token] = true
	}
	return nil
}
