package main

import (
	"fmt"
	"strings"

	"github.com/inferq/inferq/crash"
)

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
	key, err := crash.ReadKeyFile(file)
	if err != nil {
		return nil, fmt.Errorf("--crash-key-file %s: %w", file, err)
	}
	return key, nil
}
