package repository

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/models"
)

// ModelFile is a version directory's model file.
const ModelFile = "model.onnx"

// ConfigFile is a model directory's optional configuration.
const ConfigFile = "config.yaml"

// Stamp identifies one state of a model file: a change of size or
// modification time is a change of the file (Triton's rule).
type Stamp struct {
	Size    int64
	ModTime time.Time
}

// Version is one version directory with its model file.
type Version struct {
	N     int64
	Path  string
	Stamp Stamp
}

// Entry is one model directory as a scan found it.
type Entry struct {
	Name string
	// Model is config.yaml's settings (defaults without one); its Path is
	// set per version when loaded.
	Model  models.Model
	Policy models.VersionPolicy
	// ConfigSum is config.yaml's SHA-256 ("" without one): a change
	// reloads every version.
	ConfigSum string
	// Versions are the version directories holding a model file,
	// ascending.
	Versions []Version
	// Err says why the model cannot load (a bad config.yaml); Versions
	// are still listed.
	Err error
}

// Selected returns the versions the policy serves, ascending: the
// highest Latest (default 1), or those of Specific that exist.
func (e *Entry) Selected() []Version {
	if len(e.Policy.Specific) > 0 {
		var out []Version
		for _, v := range e.Versions {
			if slices.Contains(e.Policy.Specific, v.N) {
				out = append(out, v)
			}
		}
		return out
	}
	n := max(e.Policy.Latest, 1)
	return e.Versions[max(len(e.Versions)-n, 0):]
}

// Scan reads the repository at dir: one Entry per model directory, by
// name. Entries whose name starts with '.' and plain files are skipped, as
// are version directories not named by a positive integer and those
// without a model file. It fails only when dir cannot be read.
func Scan(dir string) (map[string]*Entry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model repository %s: %w", dir, err)
	}
	out := map[string]*Entry{}
	for _, de := range des {
		if !de.IsDir() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		out[de.Name()] = scanModel(filepath.Join(dir, de.Name()), de.Name())
	}
	return out, nil
}

func scanModel(dir, name string) *Entry {
	e := &Entry{Name: name}
	e.Versions, e.Err = scanVersions(dir)
	// At most models.MaxConfigBytes of a regular file; a named pipe or a
	// device is refused without blocking the scan.
	cfg, err := models.ReadConfigFile(filepath.Join(dir, ConfigFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfg = nil
	case err != nil:
		e.Err = errors.Join(e.Err, fmt.Errorf("model %q: %w", name, err))
		return e
	default:
		e.ConfigSum = fmt.Sprintf("%x", sha256.Sum256(cfg))
	}
	m, pol, err := models.ParseModel(cfg, name, filepath.Join(dir, "<version>", ModelFile))
	e.Model, e.Policy = m, pol
	if err != nil {
		e.Err = errors.Join(e.Err, err)
	}
	if e.Err == nil && len(e.Versions) == 0 {
		e.Err = fmt.Errorf("model %q: no version directory with a %s (want %s/<version>/%s)", name, ModelFile, name, ModelFile)
	}
	return e
}

func scanVersions(dir string) ([]Version, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model directory %s: %w", dir, err)
	}
	var out []Version
	for _, de := range des {
		n, err := strconv.ParseInt(de.Name(), 10, 64)
		if !de.IsDir() || err != nil || n <= 0 || strconv.FormatInt(n, 10) != de.Name() {
			continue
		}
		p := filepath.Join(dir, de.Name(), ModelFile)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, Version{N: n, Path: p, Stamp: Stamp{Size: fi.Size(), ModTime: fi.ModTime()}})
	}
	slices.SortFunc(out, func(a, b Version) int { return int(min(max(a.N-b.N, -1), 1)) })
	return out, nil
}
