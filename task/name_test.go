package task

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// nameCases are names and whether CheckName takes them; the fuzz test's
// seeds come from them.
var nameCases = []struct {
	name string
	s    string
	ok   bool
	want string // in the error
}{
	{"uuid", "4f0c1d7e-9b1a-4c3e-8f00-1234567890ab", true, ""},
	{"dash underscore dot", "job_1-a.b.c", true, ""},
	{"one byte", "x", true, ""},
	{"the limit", strings.Repeat("a", MaxNameBytes), true, ""},
	{"reply channel", "inferq.reply.host-1", true, ""},
	{"empty", "", false, "task_id is empty"},
	{"newline", "x\nC victim 50", false, `task_id "x\nC victim 50" has "\n" at byte 1`},
	{"carriage return", "a\rb", false, `"\r"`},
	{"tab", "a\tb", false, `"\t"`},
	{"nul", "a\x00b", false, `"\x00"`},
	{"del", "a\x7fb", false, `"\x7f"`},
	{"space", "a b", false, `" " at byte 1`},
	{"star", "a.*", false, `"*"`},
	{"greater than", "a.>", false, `">"`},
	{"colon (routing)", "events:x", false, `":"`},
	{"semicolon (routing)", "a;queues:b", false, `";"`},
	{"slash", "a/b", false, `"/"`},
	{"backslash", `a\b`, false, `"\\"`},
	{"trailing dot", "abc.", false, "ends with '.'"},
	{"leading dot", ".abc", false, "starts with '.'"},
	{"only a dot", ".", false, "starts with '.'"},
	{"empty segment", "a..b", false, "empty '.'-separated part at byte 2"},
	{"over the limit", strings.Repeat("a", MaxNameBytes+1), false, "is 257 bytes, over the limit of 256"},
	{"4.5 MiB", strings.Repeat("a", 9<<19), false, "is 4718592 bytes, over the limit of 256"},
	{"invalid UTF-8", "a\xffb", false, `"\xff" at byte 1`},
	{"non-ASCII", "tâche", false, `"\xc3" at byte 1`},
}

func TestCheckName(t *testing.T) {
	for _, tc := range nameCases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckName("task_id", tc.s)
			if tc.ok {
				if err != nil {
					t.Fatalf("CheckName(%.40q) = %v, want nil", tc.s, err)
				}
				return
			}
			if !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckName(%.40q) = %v, want ErrBadName saying %q", tc.s, err, tc.want)
			}
			if n := len(err.Error()); n > 300 {
				t.Errorf("error of %d bytes: it must quote a bounded part of the name", n)
			}
		})
	}
}

// nameRule is CheckName's rule written another way.
var nameRule = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// FuzzCheckName: CheckName takes exactly the names of its rule, never one
// the broker refuses or misreads, and its errors stay small.
func FuzzCheckName(f *testing.F) {
	for _, tc := range nameCases {
		if len(tc.s) <= 4096 {
			f.Add(tc.s)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckName("reply_to", s)
		want := len(s) <= MaxNameBytes && nameRule.MatchString(s)
		if (err == nil) != want {
			t.Fatalf("CheckName(%q) = %v, want ok %v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrBadName) || !strings.HasPrefix(err.Error(), "task: invalid name: reply_to ") || len(err.Error()) > 300 {
				t.Fatalf("error %q", err)
			}
			return
		}
		if !utf8.ValidString(s) || strings.ContainsAny(s, " \t\r\n*>:;/") || strings.HasSuffix(s, ".") {
			t.Fatalf("took %q", s)
		}
	})
}
