package models

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// MaxConfigBytes bounds a config file: the main one (Load, Parse) and a
// repository model's config.yaml (ParseModel, ReadConfigFile). A real one
// is a few KiB.
const MaxConfigBytes = 1 << 20

// ReadConfigFile reads the config file at path: a regular file (a symlink
// to one is followed) of at most MaxConfigBytes. Anything else is refused
// without reading it whole and without blocking: a named pipe, a device, a
// directory, a file over the limit. Errors name the path, never the
// content; a missing file wraps fs.ErrNotExist.
func ReadConfigFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a named pipe does not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (mode %s)", path, fi.Mode())
	}
	if fi.Size() > MaxConfigBytes {
		return nil, fmt.Errorf("%s: %w", path, errTooLarge(fi.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxConfigBytes { // it grew since the stat
		return nil, fmt.Errorf("%s: %w", path, errTooLarge(int64(len(data))))
	}
	return data, nil
}

func errTooLarge(n int64) error {
	return fmt.Errorf("%d bytes or more is over the limit of %d bytes (1 MiB) for a config file", n, MaxConfigBytes)
}

// keyPattern is what a key must look like for an error to name it: a
// plausible field name. Any other key of the file is not shown (it may be
// a secret's first bytes, from a config.yaml symlinked to a secrets file).
var keyPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// showKey returns k for an error message, or "(not shown)" when it may be
// content that is not meant to be a key.
func showKey(k string) string {
	if keyPattern.MatchString(k) {
		return k
	}
	return "(not shown)"
}

// decodeError rewrites an error of the YAML decoder so that it says the
// line and the field but no value of the file: the library quotes the
// first bytes of a value it cannot decode (cannot unmarshal !!str
// `AKIA123...`), anchor names and map keys. inferq's own decode errors
// (UnmarshalYAML, checkKnownFields) already show no value.
func decodeError(err error) error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			lines[i] = scrubTypeEntry(e)
		}
		msg = strings.Replace(msg, te.Error(), "yaml: unmarshal errors:\n  "+strings.Join(lines, "\n  "), 1)
	} else if i := strings.Index(msg, "yaml: "); i >= 0 {
		msg = msg[:i] + scrubFailure(msg[i:])
	}
	return errors.New(msg)
}

var (
	linePrefix   = regexp.MustCompile(`^line \d+: `)
	unmarshalTag = regexp.MustCompile(`^cannot unmarshal (\S+)`)
	mappingKey   = regexp.MustCompile(`^mapping key (.*) already defined at (line \d+)$`)
	fieldEntry   = regexp.MustCompile(`^field (.*) (not found|already set) in type (\S+)$`)
)

// scrubTypeEntry rewrites one entry of a yaml.TypeError.
func scrubTypeEntry(e string) string {
	line := linePrefix.FindString(e)
	rest := e[len(line):]
	switch {
	case strings.HasPrefix(rest, "cannot unmarshal "):
		tag := unmarshalTag.FindStringSubmatch(rest)[1]
		into := rest[strings.LastIndex(rest, " into ")+len(" into "):]
		if strings.HasPrefix(tag, "`") { // no tag: the value came first
			tag = "a value"
		}
		return fmt.Sprintf("%scannot unmarshal %s into %s", line, tag, into)
	case strings.HasPrefix(rest, "mapping key "):
		m := mappingKey.FindStringSubmatch(rest)
		if m == nil {
			return line + "a mapping key is defined twice"
		}
		key, err := strconv.Unquote(m[1])
		if err != nil {
			key = ""
		}
		return fmt.Sprintf("%smapping key %s defined twice (first at %s)", line, showKey(key), m[2])
	}
	if m := fieldEntry.FindStringSubmatch(rest); m != nil {
		return fmt.Sprintf("%sfield %s %s in type %s", line, showKey(m[1]), m[2], m[3])
	}
	return line + "invalid value"
}

// scrubFailure rewrites an error the YAML library failed with ("yaml:
// ..."). Its syntax errors ("yaml: line 3: did not find expected key")
// are fixed texts and kept; those that quote the file are cut.
func scrubFailure(msg string) string {
	switch {
	case linePrefix.MatchString(strings.TrimPrefix(msg, "yaml: ")):
		return msg
	case strings.HasPrefix(msg, "yaml: unknown anchor"):
		return "yaml: unknown anchor referenced"
	case strings.HasPrefix(msg, "yaml: anchor"):
		return "yaml: an anchor's value contains itself"
	case strings.HasPrefix(msg, "yaml: invalid map key"):
		return "yaml: invalid map key"
	case strings.HasPrefix(msg, "yaml: cannot decode"):
		return "yaml: cannot decode a value"
	case strings.ContainsAny(msg, "`'\""):
		return "yaml: invalid document"
	}
	return msg
}
