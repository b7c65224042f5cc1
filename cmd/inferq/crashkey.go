package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/inferq/inferq/crash"
)

// maxCrashKeyFileBytes bounds the fleet key file read: a key is a short
// random string, so anything larger is not one.
const maxCrashKeyFileBytes = 4096

// crashKey is the fleet key that signs crash reports (crash.FleetConfig.Key):
// the trimmed content of file (--crash-key-file, else
// $INFERQ_CRASH_KEY_FILE; a mounted Secret), else the trimmed
// $INFERQ_CRASH_KEY; nil when neither is set. A file and the variable
// together are a usage error. Errors name the file or variable, never the
// key.
func crashKey(a *app, file string) ([]byte, error) {
	if file == "" {
		file = a.getenv("INFERQ_CRASH_KEY_FILE")
	}
	env := strings.TrimSpace(a.getenv("INFERQ_CRASH_KEY"))
	switch {
	case file != "" && env != "":
		return nil, usageErrorf("the fleet key comes from --crash-key-file (or INFERQ_CRASH_KEY_FILE) or INFERQ_CRASH_KEY, not both")
	case env != "":
		if err := crash.CheckKey([]byte(env)); err != nil {
			return nil, fmt.Errorf("INFERQ_CRASH_KEY: %w", err)
		}
		return []byte(env), nil
	case file == "":
		return nil, nil
	}
	key, err := readKeyFile(file)
	if err != nil {
		return nil, fmt.Errorf("--crash-key-file %s: %w", file, err)
	}
	if err := crash.CheckKey(key); err != nil {
		return nil, fmt.Errorf("--crash-key-file %s: %w", file, err)
	}
	return key, nil
}

// readKeyFile reads a key file of at most maxCrashKeyFileBytes, trimmed.
// A Kubernetes Secret volume's files are symlinks into its ..data
// directory: they are followed.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.Unwrap(err) // the path is in the caller's message
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCrashKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", errors.Unwrap(err))
	}
	if len(b) > maxCrashKeyFileBytes {
		return nil, fmt.Errorf("over %d bytes: not a key", maxCrashKeyFileBytes)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}
