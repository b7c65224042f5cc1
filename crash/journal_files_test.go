package crash

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The journal's files are opened through package datadir (issue 27 item
// 3): a symlink pre-placed where the journal writes (its old temporary
// file's name, or the journal itself) is never written through, the file
// is created 0600 in a directory 0700, and a directory group or others may
// write is refused.
func TestJournalFollowsNoSymlink(t *testing.T) {
	const content = "the victim's bytes\n"
	victim := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unchanged := func(t *testing.T, p string) {
		t.Helper()
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Errorf("the symlink's target was written through: %q, %v", b, err)
		}
	}
	t.Run("temporary file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "journal")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		target := victim(t)
		if err := os.Symlink(target, filepath.Join(dir, journalFile+".tmp")); err != nil {
			t.Fatal(err)
		}
		j := openTestJournal(t, dir)
		if err := j.Start("a"); err != nil {
			t.Fatal(err)
		}
		j = crashAndReopen(t, j, dir) // a rewrite at each open
		if j.Crashes("a") != 1 {
			t.Errorf("Crashes(a) = %d, want 1", j.Crashes("a"))
		}
		unchanged(t, target)
	})
	t.Run("journal", func(t *testing.T) {
		dir := t.TempDir()
		target := victim(t)
		link := filepath.Join(dir, journalFile)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		j, err := OpenJournal(dir)
		if err == nil {
			_ = j.Start("a")
			_ = j.Close()
			t.Error("a journal that is a symlink was opened")
		} else if !strings.Contains(err.Error(), link) {
			t.Errorf("error %q does not name %s", err, link)
		}
		unchanged(t, target)
	})
	t.Run("modes", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data", "journal")
		j := openTestJournal(t, dir)
		if err := j.Start("a"); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Dir(dir): 0o700, filepath.Join(dir, journalFile): 0o600} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: %v, want mode %#o", p, fi.Mode(), want)
			}
		}
	})
	t.Run("group-writable dir", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o770); err != nil {
			t.Fatal(err)
		}
		if j, err := OpenJournal(dir); err == nil {
			_ = j.Close()
			t.Error("a journal dir group may write was taken")
		} else if !strings.Contains(err.Error(), dir) {
			t.Errorf("error %q does not name %s", err, dir)
		}
	})
}
