package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/inferq/inferq/task"
)

// A crash report is what a process publishes on CrashChannel(queue) when
// it starts with crash counts in its journal: for each message id (as its
// journal token), how many times processes on that journal died running
// it. Counts are cumulative per journal, so a report may be delivered,
// replayed or published again (by the next process on the same journal)
// any number of times: the fleet keeps the largest count per (journal,
// message), and sums over journals.
type CrashReport struct {
	// V is the format version, crashReportVersion.
	V int `json:"v"`
	// Journal is the id of the journal whose counts these are
	// (Journal.ID): the key the fleet dedupes on.
	Journal string `json:"journal"`
	// Incarnation is the id of the process that published it (random per
	// process), and Reporter its name (the worker's host name): for logs
	// and operators, not for counting.
	Incarnation string `json:"incarnation"`
	Reporter    string `json:"reporter"`
	// Crashes are the counts, at most crashReportMaxEntries.
	Crashes []CrashCount `json:"crashes"`
}

// CrashCount is one message's count in a crash report.
type CrashCount struct {
	// Token is journalToken of the message id.
	Token string `json:"token"`
	// N is the number of crashes, 1 to crashReportMaxCount.
	N int `json:"n"`
}

const (
	crashReportVersion = 1
	// crashReportMaxBytes bounds an encoded report; a decoder refuses a
	// longer body before parsing it.
	crashReportMaxBytes = 256 << 10
	// crashReportMaxEntries bounds the counts in one report (a longer
	// list is sent as several reports): each token is at most ~2 KB
	// quoted, so a report stays under crashReportMaxBytes.
	crashReportMaxEntries = 100
	// crashReportMaxCount bounds one count: a forged report cannot make
	// a sum overflow.
	crashReportMaxCount = 1 << 20
	// crashReportMaxReporter bounds the reporter's name.
	crashReportMaxReporter = 256
)

// CrashChannelSuffix is appended to a queue's name to name its crash
// report channel (an Events Store channel).
const CrashChannelSuffix = ".crashes"

// CrashChannel is queue's crash report channel; an error when the name is
// not one task.CheckName accepts (too long with the suffix).
func CrashChannel(queue string) (string, error) {
	ch := queue + CrashChannelSuffix
	if err := task.CheckName("crash report channel", ch); err != nil {
		return "", err
	}
	return ch, nil
}

// crashReports splits counts into reports of at most
// crashReportMaxEntries each, all from journal and incarnation. No counts:
// one report without counts (a heartbeat: the journal is there).
func crashReports(journal, incarnation, reporter string, counts map[string]int) []CrashReport {
	var out []CrashReport
	cur := CrashReport{V: crashReportVersion, Journal: journal, Incarnation: incarnation, Reporter: clipReporter(reporter)}
	for tok, n := range counts {
		if n < 1 {
			continue
		}
		cur.Crashes = append(cur.Crashes, CrashCount{Token: tok, N: min(n, crashReportMaxCount)})
		if len(cur.Crashes) == crashReportMaxEntries {
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
// crashReportMaxReporter bytes.
func clipReporter(s string) string {
	s = string(bytes.ToValidUTF8([]byte(s), []byte("?")))
	for len(s) > crashReportMaxReporter {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// Encode returns the report's JSON body.
func (r CrashReport) Encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("consumer: encode crash report: %w", err)
	}
	return b, nil
}

var errBadCrashReport = errors.New("malformed crash report")

// DecodeCrashReport parses and checks a report's body. Anything but what
// Encode writes for a valid report is refused: an unknown field, a wrong
// version, a journal or incarnation id that is not 32 hex digits, a token
// journalToken could not have written, a count out of range, a token
// twice, more than crashReportMaxEntries counts or a body over
// crashReportMaxBytes.
func DecodeCrashReport(body []byte) (CrashReport, error) {
	var r CrashReport
	if len(body) > crashReportMaxBytes {
		return r, fmt.Errorf("%w: %d bytes, over %d", errBadCrashReport, len(body), crashReportMaxBytes)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return CrashReport{}, fmt.Errorf("%w: %w", errBadCrashReport, err)
	}
	if d.More() {
		return CrashReport{}, fmt.Errorf("%w: data after the report", errBadCrashReport)
	}
	if err := r.check(); err != nil {
		return CrashReport{}, err
	}
	return r, nil
}

func (r CrashReport) check() error {
	switch {
	case r.V != crashReportVersion:
		return fmt.Errorf("%w: version %d, want %d", errBadCrashReport, r.V, crashReportVersion)
	case !isJournalID(r.Journal):
		return fmt.Errorf("%w: journal id %.40q is not %d hex digits", errBadCrashReport, r.Journal, journalIDLen)
	case !isJournalID(r.Incarnation):
		return fmt.Errorf("%w: incarnation %.40q is not %d hex digits", errBadCrashReport, r.Incarnation, journalIDLen)
	case len(r.Reporter) > crashReportMaxReporter || !utf8.ValidString(r.Reporter):
		return fmt.Errorf("%w: reporter name too long or not UTF-8", errBadCrashReport)
	case len(r.Crashes) > crashReportMaxEntries:
		return fmt.Errorf("%w: %d counts, over %d", errBadCrashReport, len(r.Crashes), crashReportMaxEntries)
	}
	seen := make(map[string]bool, len(r.Crashes))
	for i, c := range r.Crashes {
		if tok, rest, ok := parseToken(c.Token); !ok || rest != "" || tok != c.Token {
			return fmt.Errorf("%w: count %d: token %.40q is not a journal token", errBadCrashReport, i, c.Token)
		}
		if c.N < 1 || c.N > crashReportMaxCount {
			return fmt.Errorf("%w: count %d: %d out of range [1, %d]", errBadCrashReport, i, c.N, crashReportMaxCount)
		}
		if seen[c.Token] {
			return fmt.Errorf("%w: count %d: token %.40q twice", errBadCrashReport, i, c.Token)
		}
		seen[c.Token] = true
	}
	return nil
}
