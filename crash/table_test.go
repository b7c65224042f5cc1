package crash

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	journalA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	journalB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	journalC = "cccccccccccccccccccccccccccccccc"
	incarn1  = "11111111111111111111111111111111"
	incarn2  = "22222222222222222222222222222222"
)

func report(journal, incarnation string, counts ...any) Report {
	r := Report{V: reportVersion, Journal: journal, Incarnation: incarnation, Reporter: "host"}
	for i := 0; i < len(counts); i += 2 {
		r.Crashes = append(r.Crashes, Count{Token: Token(counts[i].(string)), N: counts[i+1].(int)})
	}
	return r
}

// The fleet's count of a message is the sum over journals of the largest
// count each reported, plus this process's journal where it knows more
// than its reports say.
func TestTableCounts(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	type add struct {
		r  Report
		at time.Duration // after t0
	}
	tests := []struct {
		name  string
		adds  []add
		self  string
		local int
		want  int
	}{
		{"nothing reported: the local count", nil, journalA, 2, 2},
		{"one report", []add{{report(journalB, incarn1, "m", 1), 0}}, journalA, 0, 1},
		{"a duplicate delivery counts once", []add{{report(journalB, incarn1, "m", 1), 0}, {report(journalB, incarn1, "m", 1), 0}}, journalA, 0, 1},
		{"a journal's next process republishes its cumulative count", []add{
			{report(journalB, incarn1, "m", 1), 0}, {report(journalB, incarn2, "m", 2), time.Second}, {report(journalB, incarn1, "m", 1), 2 * time.Second}}, journalA, 0, 2},
		{"distinct journals add up", []add{{report(journalB, incarn1, "m", 1), 0}, {report(journalC, incarn1, "m", 2), 0}}, journalA, 0, 3},
		{"own report and own journal: the larger, once", []add{{report(journalA, incarn1, "m", 1), 0}, {report(journalB, incarn1, "m", 1), 0}}, journalA, 2, 3},
		{"own report ahead of the local journal", []add{{report(journalA, incarn1, "m", 2), 0}}, journalA, 0, 2},
		{"other messages do not count", []add{{report(journalB, incarn1, "other", 5), 0}}, journalA, 0, 0},
		{"a report older than the window is ignored", []add{{report(journalB, incarn1, "m", 1), -2 * time.Hour}}, journalA, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := newTable(time.Hour, 100)
			now := t0.Add(2 * time.Second)
			for _, a := range tt.adds {
				tab.add(a.r, t0.Add(a.at), now)
			}
			if got := tab.crashes(Token("m"), tt.self, tt.local, now); got != tt.want {
				t.Errorf("crashes = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestTableExpiry(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	tab := newTable(time.Hour, 100)
	tab.add(report(journalB, incarn1, "old", 1), t0, t0)
	tab.add(report(journalB, incarn1, "new", 1), t0.Add(30*time.Minute), t0.Add(30*time.Minute))
	now := t0.Add(61 * time.Minute)
	if got := tab.crashes(Token("old"), journalA, 0, now); got != 0 {
		t.Errorf("expired count read as %d", got)
	}
	tab.expire(now)
	if tab.len() != 1 {
		t.Errorf("after expire %d entries, want 1 (new)", tab.len())
	}
	if got := tab.crashes(Token("new"), journalA, 0, now); got != 1 {
		t.Errorf("live count read as %d, want 1", got)
	}
	if !tab.peers(journalA, now) {
		t.Error("journal B reported 31 min ago: a peer")
	}
	if tab.peers(journalB, now) {
		t.Error("B's own reports are no peer of B's")
	}
	if tab.peers(journalA, t0.Add(2*time.Hour)) {
		t.Error("a peer silent for longer than the window still counts")
	}
}

// The table never holds more than its cap: the least recently reported
// messages go first, and a message counts at most maxJournals journals.
func TestTableCap(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	tab := newTable(time.Hour, 20)
	for i := range 50 {
		at := t0.Add(time.Duration(i) * time.Second)
		tab.add(report(journalB, incarn1, fmt.Sprintf("m%d", i), 1), at, at)
		if tab.len() > 20 {
			t.Fatalf("after %d reports %d entries, over the cap of 20", i+1, tab.len())
		}
	}
	now := t0.Add(50 * time.Second)
	if got := tab.crashes(Token("m49"), journalA, 0, now); got != 1 {
		t.Errorf("the newest entry was dropped")
	}
	if got := tab.crashes(Token("m0"), journalA, 0, now); got != 0 {
		t.Errorf("the oldest entry was kept")
	}

	tab = newTable(time.Hour, 20)
	for i := range defaultJournalsMax + 10 {
		j := fmt.Sprintf("%032x", i+1)
		tab.add(report(j, incarn1, "m", 1), t0, t0)
	}
	if got := tab.crashes(Token("m"), journalA, 0, t0); got != defaultJournalsMax {
		t.Errorf("count %d from %d journals, want the cap %d", got, defaultJournalsMax+10, defaultJournalsMax)
	}
}

func TestReportRoundTrip(t *testing.T) {
	counts := map[string]int{}
	for i := range reportMaxEntries + 5 {
		counts[Token(fmt.Sprintf("id-%d\n%s", i, strings.Repeat("x", i)))] = i%3 + 1
	}
	counts[Token(strings.Repeat("L", 2000))] = reportMaxCount + 7
	rs := splitReports(journalA, incarn1, strings.Repeat("h", 300)+"\xff", counts)
	if len(rs) != 2 {
		t.Fatalf("%d reports, want 2", len(rs))
	}
	got := map[string]int{}
	for _, r := range rs {
		body, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodeReport(body)
		if err != nil {
			t.Fatalf("decode own report: %v", err)
		}
		for _, c := range d.Crashes {
			got[c.Token] = c.N
		}
	}
	for tok, n := range counts {
		if want := min(n, reportMaxCount); got[tok] != want {
			t.Errorf("%.30s: %d, want %d", tok, got[tok], want)
		}
	}
	if hb := splitReports(journalA, incarn1, "h", nil); len(hb) != 1 || len(hb[0].Crashes) != 0 {
		t.Errorf("no counts: %+v, want one heartbeat report", hb)
	}
}

func TestDecodeReportRefuses(t *testing.T) {
	ok := `{"v":1,"journal":"` + journalA + `","incarnation":"` + incarn1 + `","reporter":"h","crashes":[{"token":"\"m\"","n":1}]}`
	if _, err := DecodeReport([]byte(ok)); err != nil {
		t.Fatalf("valid report refused: %v", err)
	}
	bad := map[string]string{
		"not json":          `crash`,
		"empty":             ``,
		"two values":        ok + ok,
		"unknown field":     strings.Replace(ok, `"v":1`, `"v":1,"admin":true`, 1),
		"version 2":         strings.Replace(ok, `"v":1`, `"v":2`, 1),
		"no version":        strings.Replace(ok, `"v":1,`, ``, 1),
		"short journal":     strings.Replace(ok, journalA, "aaaa", 1),
		"upper hex journal": strings.Replace(ok, journalA, strings.ToUpper(journalA), 1),
		"bad incarnation":   strings.Replace(ok, incarn1, "x"+incarn1[1:], 1),
		"raw id token":      strings.Replace(ok, `"\"m\""`, `"m"`, 1),
		"token with tail":   strings.Replace(ok, `"\"m\""`, `"\"m\" 5"`, 1),
		"zero count":        strings.Replace(ok, `"n":1`, `"n":0`, 1),
		"negative count":    strings.Replace(ok, `"n":1`, `"n":-4`, 1),
		"huge count":        strings.Replace(ok, `"n":1`, `"n":99999999999`, 1),
		"token twice":       strings.Replace(ok, `{"token":"\"m\"","n":1}`, `{"token":"\"m\"","n":1},{"token":"\"m\"","n":2}`, 1),
		"bad hash token":    strings.Replace(ok, `"\"m\""`, `"sha256:zz"`, 1),
		"long reporter":     strings.Replace(ok, `"reporter":"h"`, `"reporter":"`+strings.Repeat("h", 300)+`"`, 1),
		"over size":         ok + strings.Repeat(" ", reportMaxBytes),
	}
	many := make([]string, reportMaxEntries+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"token":"\"m%d\"","n":1}`, i)
	}
	bad["too many counts"] = strings.Replace(ok, `{"token":"\"m\"","n":1}`, strings.Join(many, ","), 1)
	for name, body := range bad {
		if r, err := DecodeReport([]byte(body)); err == nil {
			t.Errorf("%s: accepted as %+v", name, r)
		}
	}
}

// Whatever a producer writes on a crash channel, the decoder either
// refuses it or returns a report that passes every check and encodes back
// to one it accepts again.
func FuzzDecodeReport(f *testing.F) {
	for _, r := range []Report{report(journalA, incarn1, "m", 1, "n\nx", 3), report(journalB, incarn2)} {
		b, _ := r.Encode()
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"crashes":[{"token":"sha256:` + strings.Repeat("0", 64) + `","n":1}]}`))
	f.Add([]byte(`{"v":1,"journal":null}`))
	signed, _ := report(journalA, incarn1, "m", 2).Sign([]byte("fleet-key-0123456789abcdef"), "q.crashes", time.Now()).Encode()
	f.Add(signed)
	f.Add([]byte(`{"v":1,"journal":"` + journalA + `","incarnation":"` + incarn1 + `","reporter":"","crashes":[],"at":-1,"sig":"00"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeReport(body)
		if err != nil {
			return
		}
		// Whatever it holds, checking its signature does not panic, and
		// a report that verifies is one signed with the key.
		if r.Verify([]byte("fleet-key-0123456789abcdef"), "q.crashes", time.Now(), time.Hour) == nil && r.Sig == "" {
			t.Fatal("an unsigned report verified")
		}
		if err := r.check(); err != nil {
			t.Fatalf("decoded report fails its check: %v", err)
		}
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeReport(b); err != nil {
			t.Fatalf("re-encoded report refused: %v", err)
		}
		tab := newTable(time.Hour, 10)
		now := time.Now()
		tab.add(r, now, now)
		if tab.len() > 10 {
			t.Fatalf("table over its cap: %d", tab.len())
		}
	})
}
