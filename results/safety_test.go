package results

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The spool directory is the data dir's results/: one that group or
// others may write is refused, naming it and its mode (it stayed 0777,
// issue 27 item 3).
func TestSpoolDirWritableByOthersRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(newFakeBroker())
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s, err := New(cfg)
	if err == nil {
		_ = s.Close(context.Background())
		t.Fatal("New took a spool directory of mode 0777")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "0777") {
		t.Errorf("error %q does not name %s and its mode", err, dir)
	}
	// A new one is created 0700.
	fresh := filepath.Join(t.TempDir(), "data", "results")
	cfg.DataDir = fresh
	s = newStore(t, cfg)
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("new spool dir: %v, %v; want mode 0700", fi.Mode(), err)
	}
}

// Spool files are written without following a link placed where the
// spool writes (the temporary file, the record file): the links' targets
// keep their content and the record lands in a regular 0600 file.
func TestSpoolWritesNoLinks(t *testing.T) {
	dir := t.TempDir()
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = dir, false
	s := newStore(t, cfg)
	outside := t.TempDir()
	var targets []string
	for _, ext := range []string{extTmp, extPending} {
		target := filepath.Join(outside, "precious"+ext)
		if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, (disk{dir}).path(1, ext)); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target)
	}
	body := rec("t1", "SUCCESS")
	_ = s.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: body})
	for _, target := range targets {
		if b, _ := os.ReadFile(target); string(b) != "precious\n" {
			t.Errorf("%s now holds %q", target, b)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+extPending))
	for _, f := range files {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want a regular file of mode 0600", f, fi.Mode(), err)
		}
	}
	if got, ok := s.Get("t1"); !ok || string(got) != string(body) {
		t.Errorf("Get = %q %v", got, ok)
	}
}

// A spool file that is a link is not read at start: it is set aside like
// a corrupt one, and its target is not served as a record.
func TestSpoolReadsNoLinks(t *testing.T) {
	elsewhere := t.TempDir()
	fb := newFakeBroker()
	fb.down = true
	cfg := testConfig(fb)
	cfg.DataDir, cfg.MemoryOnly = elsewhere, false
	s1 := newStore(t, cfg)
	_ = s1.Put(context.Background(), Entry{TaskID: "t1", Status: "SUCCESS", Terminal: true, Body: rec("t1", "SUCCESS")})
	files, _ := filepath.Glob(filepath.Join(elsewhere, "*"+extPending))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	dir := t.TempDir()
	if err := os.Symlink(files[0], filepath.Join(dir, filepath.Base(files[0]))); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	s2 := newStore(t, cfg)
	if st := s2.Stats(); st.Pending != 0 {
		t.Errorf("a linked spool file was taken: pending %d", st.Pending)
	}
	if _, ok := s2.Get("t1"); ok {
		t.Error("a linked spool file's record is served")
	}
}
