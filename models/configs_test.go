package models

import (
	"path/filepath"
	"testing"
)

// The example configs shipped in configs/ must stay valid.
func TestShippedConfigsParse(t *testing.T) {
	paths, err := filepath.Glob("../configs/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no configs found: %v", err)
	}
	for _, p := range paths {
		if _, err := Load(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
