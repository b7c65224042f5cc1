package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fleet key (issue 27 item 2) comes from --crash-key-file (or
// INFERQ_CRASH_KEY_FILE), a mounted Secret, or from INFERQ_CRASH_KEY;
// surrounding whitespace is trimmed. Both a file and the variable is a
// usage error; a key too short, a file too large, absent or unreadable is
// an error naming the file and never showing its content.
func TestServeCrashKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("key", "  0123456789abcdef0123456789abcdef\n")
	short := write("short", "SECRETBYTES\n")
	big := write("big", strings.Repeat("K", 5000))
	for _, tc := range []struct {
		name    string
		flag    string
		env     map[string]string
		want    string // the key, or "" when none
		wantErr []string
		usage   bool
	}{
		{name: "none"},
		{name: "file", flag: good, want: "0123456789abcdef0123456789abcdef"},
		{name: "file from the environment", env: map[string]string{"INFERQ_CRASH_KEY_FILE": good}, want: "0123456789abcdef0123456789abcdef"},
		{name: "key from the environment", env: map[string]string{"INFERQ_CRASH_KEY": " an-env-key-long-enough \n"}, want: "an-env-key-long-enough"},
		{name: "both", flag: good, env: map[string]string{"INFERQ_CRASH_KEY": "an-env-key-long-enough"}, wantErr: []string{"--crash-key-file", "INFERQ_CRASH_KEY"}, usage: true},
		{name: "short file", flag: short, wantErr: []string{short, "at least 16"}},
		{name: "short variable", env: map[string]string{"INFERQ_CRASH_KEY": "SECRETBYTES"}, wantErr: []string{"INFERQ_CRASH_KEY", "at least 16"}},
		{name: "too large", flag: big, wantErr: []string{big, "4096"}},
		{name: "absent", flag: filepath.Join(dir, "nope"), wantErr: []string{filepath.Join(dir, "nope")}},
		{name: "a directory", flag: dir, wantErr: []string{dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, _ := testApp(tc.env)
			key, err := crashKey(a, tc.flag)
			if tc.wantErr == nil {
				if err != nil || string(key) != tc.want {
					t.Fatalf("key %q, err %v; want %q", key, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("key %q, no error", key)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "SECRETBYTES") || strings.Contains(err.Error(), "KKKK") {
				t.Errorf("error %q shows the key", err)
			}
			if isUsage := errors.Is(err, errUsage); isUsage != tc.usage {
				t.Errorf("usage error %v, want %v: %v", isUsage, tc.usage, err)
			}
		})
	}
	a, _, errb := testApp(map[string]string{"INFERQ_CRASH_KEY": "SECRETBYTES"})
	if code := a.main(context.Background(), []string{"serve", "--crash-key-file", good}); code != 2 || !strings.Contains(errb.String(), "INFERQ_CRASH_KEY") {
		t.Errorf("serve with both: exit %d, stderr %q; want 2 naming both", code, errb)
	}
	if strings.Contains(errb.String(), "SECRETBYTES") {
		t.Errorf("stderr shows the key: %q", errb)
	}
}
