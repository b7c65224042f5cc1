package models

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("500ms", "2s", "1h"). A bare 0 is accepted; any other bare number is
// refused, because "5" could mean seconds or milliseconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: not a duration: want one such as 500ms or 2s", n.Line)
	}
	s := strings.TrimSpace(n.Value)
	if s == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: not a duration: want a number with a unit, such as 500ms, 2s or 1h", n.Line)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }
