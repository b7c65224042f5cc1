package crash

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// crashAndReopen ends j as a killed process would (the file as it is, no
// Done for what is started) and opens the journal again in dir.
func crashAndReopen(t *testing.T, j *Journal, dir string) *Journal {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := OpenJournal(dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = j2.Close() })
	return j2
}

func openTestJournal(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

// Ids are producer data: whatever bytes they hold, a crash counts against
// that id alone, and the count survives the rewrites of later opens.
func TestJournalIDsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		id   string
	}{
		{"plain", "3f2c9a1e-task"},
		{"space", "with a space 7"},
		{"injected count", "x\nC victim 50"},
		{"injected start", "y\nS victim\nS victim"},
		{"injected settle", "z\nD other"},
		{"carriage return", "a\rb"},
		{"quote and backslash", `"q\"\\`},
		{"invalid utf-8", "\xff\xfe\x00"},
		{"empty", ""},
		{"looks like a header", "# inferq attempt journal 2 0"},
		{"long", strings.Repeat("L", 3000)},
		{"long with newlines", strings.Repeat("\nC victim 9", 400)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			j := openTestJournal(t, dir)
			if err := j.Start("other", tt.id); err != nil {
				t.Fatal(err)
			}
			j.Done("other")
			j = crashAndReopen(t, j, dir)
			for reopen := range 3 { // the rewrite at each open keeps the count
				if got := j.Crashes(tt.id); got != 1 {
					t.Fatalf("open %d: Crashes(%.40q) = %d, want 1", reopen, tt.id, got)
				}
				for _, innocent := range []string{"victim", "other", "x", "y", "z", "with"} {
					if innocent == tt.id {
						continue
					}
					if got := j.Crashes(innocent); got != 0 {
						t.Fatalf("open %d: Crashes(%.40q) = %d after a crash of %.40q, want 0", reopen, innocent, got, tt.id)
					}
				}
				j = crashAndReopen(t, j, dir)
			}
			j.Done(tt.id)
			if j = crashAndReopen(t, j, dir); j.Crashes(tt.id) != 0 {
				t.Fatalf("Crashes(%.40q) = %d after Done, want 0", tt.id, j.Crashes(tt.id))
			}
		})
	}
}

// A line longer than any the journal writes (a damaged file) is skipped;
// the lines after it still count.
func TestJournalLongLineDoesNotEndLoad(t *testing.T) {
	dir := t.TempDir()
	j := openTestJournal(t, dir)
	if err := j.Start("before"); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, journalFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(bytes.Repeat([]byte("S garbage"), 300_000), '\n')); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := j.Start("after"); err != nil {
		t.Fatal(err)
	}
	j = crashAndReopen(t, j, dir)
	for _, id := range []string{"before", "after"} {
		if got := j.Crashes(id); got != 1 {
			t.Errorf("Crashes(%.40q) = %d, want 1", id, got)
		}
	}
}

// The file is read as a file, not a directory or anything else: what
// cannot be read is an error naming it.
func TestJournalUnreadableFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, journalFile), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := OpenJournal(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, journalFile)) {
		t.Fatalf("OpenJournal on a directory: %v, want an error naming %s", err, journalFile)
	}
}

// However long the ids and however many tasks pass, the file stays
// bounded: compaction rewrites it with the open ids and carried counts,
// which survive it.
func TestJournalCompactionBoundsFile(t *testing.T) {
	dir := t.TempDir()
	j := openTestJournal(t, dir)
	if err := j.Start("open-across-compactions"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("i", 400)
	path := filepath.Join(dir, journalFile)
	var largest int64
	for i := range 20_000 { // ~16 MB of Start and Done lines
		id := fmt.Sprintf("%s-%d", long, i)
		if err := j.Start(id); err != nil {
			t.Fatal(err)
		}
		j.Done(id)
		if i%1000 == 0 {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, st.Size())
		}
	}
	if bound := int64(2 * journalCompactBytes); largest > bound {
		t.Fatalf("journal grew to %d bytes, want at most %d", largest, bound)
	}
	if j = crashAndReopen(t, j, dir); j.Crashes("open-across-compactions") != 1 {
		t.Fatalf("an id open across compactions: Crashes = %d, want 1", j.Crashes("open-across-compactions"))
	}
}

// Crash counts of ids never seen again do not accumulate: they age out
// after journalCarryGenerations rewrites, and at most journalMaxCarried
// are kept.
func TestJournalCarriedCountsBounded(t *testing.T) {
	t.Run("aged out", func(t *testing.T) {
		dir := t.TempDir()
		j := openTestJournal(t, dir)
		if err := j.Start("gone"); err != nil {
			t.Fatal(err)
		}
		j = crashAndReopen(t, j, dir)
		for range journalCarryGenerations - 1 {
			j = crashAndReopen(t, j, dir)
		}
		if got := j.Crashes("gone"); got != 1 {
			t.Fatalf("after %d opens: Crashes = %d, want 1 still", journalCarryGenerations, got)
		}
		for range 2 {
			j = crashAndReopen(t, j, dir)
		}
		if got := j.Crashes("gone"); got != 0 {
			t.Fatalf("after %d opens: Crashes = %d, want 0 (aged out)", journalCarryGenerations+2, got)
		}
	})
	t.Run("capped", func(t *testing.T) {
		dir := t.TempDir()
		j := openTestJournal(t, dir)
		ids := make([]string, journalMaxCarried+500)
		for i := range ids {
			ids[i] = fmt.Sprintf("id-%d", i)
		}
		if err := j.Start(ids...); err != nil {
			t.Fatal(err)
		}
		j = crashAndReopen(t, j, dir)
		if err := j.Start("newest"); err != nil {
			t.Fatal(err)
		}
		j = crashAndReopen(t, j, dir)
		kept := 0
		for _, id := range ids {
			kept += j.Crashes(id)
		}
		if kept+j.Crashes("newest") > journalMaxCarried {
			t.Fatalf("%d crash counts carried, want at most %d", kept+j.Crashes("newest"), journalMaxCarried)
		}
		if j.Crashes("newest") != 1 {
			t.Fatalf("the newest crash was dropped by the cap: Crashes = %d, want 1", j.Crashes("newest"))
		}
	})
}

// A file in the old format (ids raw, one per line) cannot be told from
// one with injected lines: it is ignored with a warning, never read.
func TestJournalOldFormatIgnored(t *testing.T) {
	dir := t.TempDir()
	old := "C victim 50\nS x\nS victim\nD x\n"
	if err := os.WriteFile(filepath.Join(dir, journalFile), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	j, err := NewJournal(JournalConfig{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got := j.Crashes("victim"); got != 0 {
		t.Fatalf("Crashes(victim) = %d from an old-format file, want 0", got)
	}
	if !strings.Contains(logs.String(), "old format") || !strings.Contains(logs.String(), filepath.Join(dir, journalFile)) {
		t.Fatalf("no warning naming the file: %q", logs.String())
	}
}

// What a crash can leave: a last line without its newline is not read;
// lines that do not parse are skipped and counted in a warning.
func TestJournalLoadDamaged(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    map[string]int
		warn    bool
	}{
		{"torn start", journalHeader(0) + "S \"a\"\nS \"b\"", map[string]int{"a": 1, "b": 0}, false},
		{"torn token", journalHeader(0) + "S \"a\"\nS \"b", map[string]int{"a": 1, "b": 0}, false},
		{"carried and started", journalHeader(3) + "C \"a\" 2 3\nS \"a\"\n", map[string]int{"a": 3}, false},
		{"settled", journalHeader(0) + "C \"a\" 2 0\nS \"a\"\nD \"a\"\nS \"b\"\n", map[string]int{"a": 0, "b": 1}, false},
		{"unquoted id", journalHeader(0) + "S a\nS \"b\"\n", map[string]int{"a": 0, "b": 1}, true},
		{"trailing bytes", journalHeader(0) + "S \"a\" 5\nC \"b\" 2 0 x\n", map[string]int{"a": 0, "b": 0}, true},
		{"bad count", journalHeader(0) + "C \"a\" -2 0\nC \"b\" 99999999999999999999 0\n", map[string]int{"a": 0, "b": 0}, true},
		{"unknown op", journalHeader(0) + "X \"a\"\n", map[string]int{"a": 0}, true},
		{"empty file", "", map[string]int{"a": 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, journalFile), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			j, err := NewJournal(JournalConfig{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			for id, n := range tt.want {
				if got := j.Crashes(id); got != n {
					t.Errorf("Crashes(%.40q) = %d, want %d", id, got, n)
				}
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tt.warn {
				t.Errorf("warned = %v, want %v: %q", warned, tt.warn, logs.String())
			}
		})
	}
}

// A journal from a newer inferq is refused, not overwritten.
func TestJournalNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, journalFile)
	newer := "# inferq attempt journal 3 0\nwhatever\n"
	if err := os.WriteFile(path, []byte(newer), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenJournal: %v, want an error naming %s", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != newer {
		t.Fatalf("the newer file was changed: %q", b)
	}
}

// FuzzJournalLoad: whatever the file holds, opening it does not panic,
// and ids started after it read back as crashes of exactly those ids.
func FuzzJournalLoad(f *testing.F) {
	f.Add([]byte(""), "a", "b")
	f.Add([]byte("C victim 50\nS x\n"), "x\nC victim 50", "victim")
	f.Add([]byte(journalHeader(2)+"C \"a\" 2 1\nS \"a\"\nD \"b\"\n"), "with space", "")
	f.Add([]byte(journalHeader(0)+"C \"a\" 2"), "\xff", "sha256:00")
	f.Add([]byte(journalHeader(0)+strings.Repeat("S \"a\"\n", 50)), strings.Repeat("x", 600), "\"")
	f.Add([]byte("# inferq attempt journal 2 18446744073709551615\n"), "a", "b")
	f.Fuzz(func(t *testing.T, content []byte, id1, id2 string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, journalFile), content, 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := OpenJournal(dir)
		if err != nil {
			if bytes.HasPrefix(content, []byte(journalMagic)) {
				return // a header this version does not read
			}
			t.Fatalf("OpenJournal: %v", err)
		}
		j.Done(id1, id2)
		if err := j.Start(id1); err != nil {
			t.Fatal(err)
		}
		if err := j.Start(id2); err != nil {
			t.Fatal(err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		j, err = OpenJournal(dir)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer j.Close()
		want1, want2 := 1, 1
		if id1 == id2 {
			want1, want2 = 2, 2
		}
		if got := j.Crashes(id1); got != want1 {
			t.Fatalf("Crashes(%.40q) = %d, want %d", id1, got, want1)
		}
		if got := j.Crashes(id2); got != want2 {
			t.Fatalf("Crashes(%.40q) = %d, want %d", id2, got, want2)
		}
	})
}
