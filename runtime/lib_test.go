package runtime_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferq/inferq/runtime"
)

func TestLocateLibrary(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("elf"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	explicit := mk("explicit/libonnxruntime.so.1")
	env := mk("env/custom-ort.so")
	exe := mk("exe/libonnxruntime.so.1")
	exeUnversioned := mk("exe2/libonnxruntime.so")
	work := mk("work/lib/libonnxruntime.so.1")
	both := mk("both/libonnxruntime.so.1")
	mk("both/libonnxruntime.so")
	empty := filepath.Join(root, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	workDir := filepath.Join(root, "work")
	missing := filepath.Join(root, "nope", "libonnxruntime.so.1")

	tests := []struct {
		name    string
		search  runtime.LibrarySearch
		want    string
		wantErr string // substring; the error must also wrap ErrLibraryNotFound
	}{
		{"explicit file wins", runtime.LibrarySearch{Explicit: explicit, Env: env, ExeDir: filepath.Dir(exe), WorkDir: workDir}, explicit, ""},
		{"explicit directory", runtime.LibrarySearch{Explicit: filepath.Dir(explicit), Env: env}, explicit, ""},
		{"env file next", runtime.LibrarySearch{Env: env, ExeDir: filepath.Dir(exe), WorkDir: workDir}, env, ""},
		{"env directory", runtime.LibrarySearch{Env: filepath.Dir(exe), WorkDir: workDir}, exe, ""},
		{"next to the executable", runtime.LibrarySearch{ExeDir: filepath.Dir(exe), WorkDir: workDir}, exe, ""},
		{"unversioned name", runtime.LibrarySearch{ExeDir: filepath.Dir(exeUnversioned), WorkDir: workDir}, exeUnversioned, ""},
		{".so.1 before .so", runtime.LibrarySearch{ExeDir: filepath.Dir(both)}, both, ""},
		{"exe dir without library falls to ./lib", runtime.LibrarySearch{ExeDir: empty, WorkDir: workDir}, work, ""},
		{"./lib last", runtime.LibrarySearch{WorkDir: workDir}, work, ""},
		{"missing explicit is an error", runtime.LibrarySearch{Explicit: missing, Env: env, WorkDir: workDir}, "", "explicit path"},
		{"missing env is an error", runtime.LibrarySearch{Env: missing, WorkDir: workDir}, "", "INFERQ_ORT_LIB"},
		{"explicit directory without library", runtime.LibrarySearch{Explicit: empty, WorkDir: workDir}, "", "explicit path"},
		{"nothing anywhere", runtime.LibrarySearch{ExeDir: empty, WorkDir: empty}, "", "no libonnxruntime.so.1 or libonnxruntime.so in"},
		{"nothing given", runtime.LibrarySearch{}, "", "no directory given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runtime.LocateLibrary(tt.search)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("LocateLibrary = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("LocateLibrary = %q, want an error", got)
			}
			if !errors.Is(err, runtime.ErrLibraryNotFound) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "make setup") {
				t.Fatalf("error %q: want ErrLibraryNotFound, %q and `make setup`", err, tt.wantErr)
			}
		})
	}
}
