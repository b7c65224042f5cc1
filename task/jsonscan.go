package task

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small validating JSON scanner over a byte slice. The envelope, tensor
// lists and records are read with it rather than encoding/json so that a
// multi-megabyte tensor is scanned once to find where it ends and decoded
// once into its final bytes, never into []any.
//
// Beyond RFC 8259 it accepts the tokens NaN, Infinity and -Infinity wherever
// a number may stand, because Python's json module writes them for float
// arrays holding those values and the adapter's producers use it. Float
// elements and timings also take them as strings ("NaN"), the form inferq
// writes in results (see appendFloat) since records must be valid JSON.

// maxDepth bounds the nesting of any JSON value (encoding/json allows 10000;
// nothing inferq reads is deeper than a tensor of rank maxRank).
const maxDepth = 512

// syntaxError is a JSON grammar error at a byte offset of the scanned slice.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.off, e.msg)
}

func synErr(off int, msg string) error { return &syntaxError{off: off, msg: msg} }

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue validates the value starting at or after b[i] (leading white
// space allowed), nested depth levels deep already, and returns the offset
// just past it. It is iterative, with no call per element, since it is the
// first of the two passes over every tensor in a task.
func skipValue(b []byte, i, depth int) (int, error) {
	var stack [maxDepth]byte // the closing bracket of each open container
	n := 0
	for {
		// A value.
		i = skipWS(b, i)
		if i >= len(b) {
			return i, synErr(i, "unexpected end of input")
		}
		var err error
		switch c := b[i]; c {
		case '{', '[':
			if depth+n >= maxDepth {
				return i, synErr(i, "nested too deeply")
			}
			stack[n] = c + 2 // '}' or ']'
			n++
			if i = skipWS(b, i+1); i < len(b) && b[i] == c+2 {
				i++
				n--
				break // empty
			}
			if c == '{' {
				if i, err = skipKey(b, i); err != nil {
					return i, err
				}
			}
			continue // the first element
		case '"':
			i, err = skipString(b, i)
		case 't':
			i, err = literal(b, i, "true")
		case 'f':
			i, err = literal(b, i, "false")
		case 'n':
			i, err = literal(b, i, "null")
		default:
			i, err = skipNumber(b, i)
		}
		if err != nil {
			return i, err
		}
		// After a value: close containers until a comma.
		for {
			if n == 0 {
				return i, nil
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return i, synErr(i, "unexpected end of input")
			}
			if b[i] == ',' {
				i++
				if stack[n-1] == '}' {
					if i, err = skipKey(b, skipWS(b, i)); err != nil {
						return i, err
					}
				}
				break
			}
			if b[i] != stack[n-1] {
				return i, synErr(i, "expected ',' or '"+string(stack[n-1])+"'")
			}
			i++
			n--
		}
	}
}

// skipKey validates an object key and its colon at b[i].
func skipKey(b []byte, i int) (int, error) {
	i, err := skipString(b, i)
	if err != nil {
		return i, err
	}
	if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
		return i, synErr(i, "expected ':' after object key")
	}
	return i + 1, nil
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	return i, synErr(i, "invalid literal")
}

// skipNumber validates a JSON number (or NaN, Infinity, -Infinity) at b[i].
// Like scanNumber it avoids branches that depend on the digits.
func skipNumber(b []byte, i int) (int, error) {
	start := i
	if i >= len(b) {
		return i, synErr(i, "unexpected end of input")
	}
	i += b2i(b[i] == '-')
	d0 := i
	i = skipDigits(b, i)
	if i == d0 || b2i(i-d0 > 1)&b2i(b[d0] == '0') == 1 {
		switch {
		case i == d0 && d0 < len(b) && b[d0] == 'I':
			return literal(b, d0, "Infinity")
		case i == d0 && d0 == start && d0 < len(b) && b[d0] == 'N':
			return literal(b, d0, "NaN")
		case i == d0 && d0 < len(b):
			return start, synErr(start, "invalid character "+quoteChar(b[d0])+" where a value was expected")
		case i == d0:
			return start, synErr(start, "invalid number")
		}
		return d0 + 1, nil // a leading zero ends the number: the caller finds the digit after it
	}
	if i < len(b) && b[i] == '.' {
		d := i + 1
		if i = skipDigits(b, d); i == d {
			return start, synErr(start, "invalid number")
		}
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		if i = skipDigits(b, d); i == d {
			return start, synErr(start, "invalid number")
		}
	}
	return i, nil
}

func quoteChar(c byte) string { return strconv.QuoteRune(rune(c)) }

// skipString validates the string starting with the quote at b[i].
func skipString(b []byte, i int) (int, error) {
	_, end, _, err := scanString(b, i)
	return end, err
}

// scanString validates the string at b[i] (a quote) and returns its raw
// contents (without quotes), the offset past the closing quote, and whether
// the contents hold escapes (then decode them with unescape).
func scanString(b []byte, i int) (raw []byte, end int, escaped bool, err error) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false, synErr(i, "expected a string")
	}
	start := i + 1
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[start:j], j + 1, escaped, nil
		case c == '\\':
			escaped = true
			j++
			if j >= len(b) {
				return nil, j, false, synErr(j, "unterminated string")
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return nil, j, false, synErr(j, "unterminated string")
				}
				for k := j + 1; k <= j+4; k++ {
					if unhex(b[k]) < 0 {
						return nil, k, false, synErr(k, "invalid \\u escape")
					}
				}
				j += 4
			default:
				return nil, j, false, synErr(j, "invalid escape")
			}
		case c < 0x20:
			return nil, j, false, synErr(j, "control character in string")
		}
	}
	return nil, len(b), false, synErr(len(b), "unterminated string")
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// unescape appends the decoded contents of a string that scanString
// validated. Lone surrogates become U+FFFD, as in encoding/json; other bytes
// are kept as they are (invalid UTF-8 included).
func unescape(dst, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw[i+1:])
			i += 4
			if utf16.IsSurrogate(r) {
				// scanString validated every escape, so a following
				// backslash-u carries its four hex digits.
				r2 := rune(-1)
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2 = hex4(raw[i+3:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \ /
			dst = append(dst, raw[i])
		}
	}
	return dst
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r = r<<4 | rune(unhex(c))
	}
	return r
}

// parseString returns the decoded string at b[i] and the offset past it.
func parseString(b []byte, i int) (string, int, error) {
	raw, end, esc, err := scanString(b, i)
	if err != nil {
		return "", end, err
	}
	if !esc {
		return string(raw), end, nil
	}
	return string(unescape(make([]byte, 0, len(raw)), raw)), end, nil
}

// eachMember walks the object at or after b[i]. For each member it calls fn
// with the decoded key (valid only during the call) and the offset of the
// value; fn returns the offset just past the value (it decodes or skips it).
// eachMember returns the offset past the closing brace.
func eachMember(b []byte, i int, fn func(key []byte, v int) (int, error)) (int, error) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '{' {
		return i, synErr(i, "expected an object")
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	var keyBuf []byte
	for {
		if i >= len(b) {
			return i, synErr(i, "unexpected end of input")
		}
		raw, end, esc, err := scanString(b, i)
		if err != nil {
			return end, err
		}
		key := raw
		if esc {
			keyBuf = unescape(keyBuf[:0], raw)
			key = keyBuf
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return i, synErr(i, "expected ':' after object key")
		}
		if i = skipWS(b, i+1); i >= len(b) {
			return i, synErr(i, "unexpected end of input")
		}
		i, err = fn(key, i)
		if err != nil {
			return i, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return i, synErr(i, "unterminated object")
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, synErr(i, "expected ',' or '}' in object")
		}
	}
}

// eachElem walks the array at or after b[i], calling fn with the offset of
// each element; fn returns the offset past the element.
func eachElem(b []byte, i int, fn func(v int) (int, error)) (int, error) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return i, synErr(i, "expected an array")
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		if i >= len(b) {
			return i, synErr(i, "unexpected end of input")
		}
		var err error
		i, err = fn(i)
		if err != nil {
			return i, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return i, synErr(i, "unterminated array")
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return i, synErr(i, "expected ',' or ']' in array")
		}
	}
}

// isNull reports whether the value at b[i] (after white space) is null.
func isNull(b []byte, i int) bool {
	i = skipWS(b, i)
	return len(b)-i >= 4 && string(b[i:i+4]) == "null"
}

// parseInt64 reads an integral JSON number at b[i] (1.0 and 1e3 count as
// integers) into an int64.
func parseInt64(b []byte, i int) (int64, int, error) {
	n, end, err := scanNumber(b, i)
	if err != nil {
		return 0, end, err
	}
	v, err := n.toInt64()
	return v, end, err
}

// parseFloat reads a JSON number at b[i] as a float64, or one of the
// strings "NaN", "Infinity" and "-Infinity" (see quotedFloat).
func parseFloat(b []byte, i int) (float64, int, error) {
	n, end, err := scanNumber(b, i)
	if err != nil {
		if n, end, err = quotedFloat(b, i, end, err); err != nil {
			return 0, end, err
		}
	}
	f, ok := n.toFloat64(b[i:end])
	if !ok {
		return 0, end, fmt.Errorf("%s is out of range", clip(b[i:end]))
	}
	return f, end, nil
}

// parseBool reads true or false at b[i].
func parseBool(b []byte, i int) (bool, int, error) {
	if end, err := literal(b, i, "true"); err == nil {
		return true, end, nil
	}
	if end, err := literal(b, i, "false"); err == nil {
		return false, end, nil
	}
	return false, i, synErr(i, "expected true or false")
}
