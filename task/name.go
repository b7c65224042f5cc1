package task

import (
	"errors"
	"fmt"
	"strconv"
)

// Names: producer data that names things. A task's id becomes part of a
// KubeMQ channel name (the compat result channel <result_prefix><task_id>),
// a journal key and a log field; its reply_to is a channel name; a queue
// message's MaxReceiveQueue is one too. The broker refuses some names for
// good (a space, '*', '>', a trailing '.': Error 120 on queues, 107, 108,
// 119 on events), reads ';' and ':' as its smart-routing syntax (a channel
// "a;queues:b" also delivers to queue b), and takes a newline without
// complaint and is damaged by it (KUBEMQ.md trap 19). So every such string
// passes CheckName before it names anything.

// MaxNameBytes bounds a task id, a reply_to channel and any other
// producer-chosen name. A UUID is 36 bytes; 256 leaves room for prefixed
// or composite ids while keeping a channel name, a journal line and a log
// field small.
const MaxNameBytes = 256

// ErrBadName: a task id or channel name that must not name anything. The
// consumer forwards such a task to the unprocessable queue, with no record
// (its id cannot be trusted).
var ErrBadName = errors.New("task: invalid name")

// quoteMax is the most bytes of a bad name an error quotes.
const quoteMax = 40

// CheckName reports whether s may name a task or a channel, or be part of
// a channel name: 1 to MaxNameBytes bytes of ASCII letters, digits, '-',
// '_' and '.', with no '.' first or last and no two '.' together (the
// broker splits names into '.'-separated tokens, and an empty token is
// invalid). Everything else is refused: white space and control
// characters, '*' and '>' (wildcards), ':' and ';' (routing), '/', any
// other punctuation, non-ASCII text and invalid UTF-8. field names s in
// the error ("task_id", "reply_to"), which wraps ErrBadName and quotes at
// most the first 40 bytes of s. Safe for concurrent use.
func CheckName(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrBadName, field)
	case len(s) > MaxNameBytes:
		return fmt.Errorf("%w: %s %s is %d bytes, over the limit of %d", ErrBadName, field, quoteName(s), len(s), MaxNameBytes)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			switch {
			case i == 0:
				return fmt.Errorf("%w: %s %s starts with '.'", ErrBadName, field, quoteName(s))
			case i == len(s)-1:
				return fmt.Errorf("%w: %s %s ends with '.'", ErrBadName, field, quoteName(s))
			case s[i-1] == '.':
				return fmt.Errorf("%w: %s %s has an empty '.'-separated part at byte %d", ErrBadName, field, quoteName(s), i)
			}
			continue
		}
		if !nameByte(c) {
			return fmt.Errorf("%w: %s %s has %s at byte %d: only ASCII letters, digits, '-', '_' and '.' are allowed",
				ErrBadName, field, quoteName(s), strconv.Quote(s[i:i+1]), i)
		}
	}
	return nil
}

// nameByte reports whether c may appear anywhere in a name.
func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// quoteName quotes the start of s for an error: Go syntax, so control
// characters and invalid UTF-8 show as escapes.
func quoteName(s string) string {
	if len(s) <= quoteMax {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:quoteMax]) + "..."
}
