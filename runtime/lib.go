package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrLibraryNotFound is wrapped by LocateLibrary's error when no onnxruntime
// shared library is found.
var ErrLibraryNotFound = errors.New("runtime: onnxruntime library not found")

// libraryNames returns the file names LocateLibrary looks for in a
// directory, in order.
func libraryNames() []string { return []string{"libonnxruntime.so.1", "libonnxruntime.so"} }

// LibrarySearch holds the places to look for the onnxruntime shared library.
// cmd/inferq fills it: nothing in this package reads the environment.
type LibrarySearch struct {
	// Explicit is the --ort-lib flag: a library file, or a directory that
	// holds one.
	Explicit string
	// Env is the value of INFERQ_ORT_LIB: a file or a directory.
	Env string
	// ExeDir is the directory of the running executable.
	ExeDir string
	// WorkDir is the working directory; its lib/ subdirectory is searched.
	WorkDir string
}

// LocateLibrary returns the path of the onnxruntime shared library: the
// first of Explicit, Env, ExeDir, WorkDir/lib that holds one. An Explicit or
// Env value that names no library is an error even if a later place has one,
// so a typo is not silently replaced by another build. The error wraps
// ErrLibraryNotFound and says to run `make setup`.
func LocateLibrary(s LibrarySearch) (string, error) {
	var looked []string
	for _, c := range []struct{ what, path string }{
		{"explicit path", s.Explicit},
		{"INFERQ_ORT_LIB", s.Env},
	} {
		if c.path == "" {
			continue
		}
		if p, ok := findLibrary(c.path, true); ok {
			return p, nil
		}
		return "", fmt.Errorf("%w: %s %q is not a library file or a directory holding %s; run `make setup` or fix the path",
			ErrLibraryNotFound, c.what, c.path, strings.Join(libraryNames(), " or "))
	}
	for _, dir := range []string{s.ExeDir, joinIfSet(s.WorkDir, "lib")} {
		if dir == "" {
			continue
		}
		if p, ok := findLibrary(dir, false); ok {
			return p, nil
		}
		looked = append(looked, dir)
	}
	return "", fmt.Errorf("%w: no %s in %s; run `make setup` to fetch it, or pass --ort-lib or set INFERQ_ORT_LIB",
		ErrLibraryNotFound, strings.Join(libraryNames(), " or "), strings.Join(quoteAll(looked), ", "))
}

// findLibrary returns path itself when it is a regular file (and fileOK),
// or the first library name found inside it when it is a directory.
func findLibrary(path string, fileOK bool) (string, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", false
	}
	if !fi.IsDir() {
		return path, fileOK && fi.Mode().IsRegular()
	}
	for _, name := range libraryNames() {
		p := filepath.Join(path, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, true
		}
	}
	return "", false
}

func joinIfSet(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

func quoteAll(s []string) []string {
	if len(s) == 0 {
		return []string{"(no directory given)"}
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
