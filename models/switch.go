package models

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Switch is an on/off setting written true or false (on/off and yes/no,
// YAML 1.1's words, are taken too, in any case). Empty is unset: the
// field's own default, which On resolves. Validate refuses any other
// value, naming the field.
type Switch string

// UnmarshalYAML takes a scalar as written; Valid judges it.
func (s *Switch) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want true or false", n.Line)
	}
	*s = Switch(strings.TrimSpace(n.Value))
	return nil
}

// MarshalYAML writes a set switch as a YAML bool.
func (s Switch) MarshalYAML() (any, error) {
	if on, ok := s.parse(); ok && s != "" {
		return on, nil
	}
	return string(s), nil
}

// Valid reports whether s is unset or one of the words for true or false.
func (s Switch) Valid() bool {
	_, ok := s.parse()
	return ok
}

// On reports whether s is on; unset (or invalid) is def.
func (s Switch) On(def bool) bool {
	if on, ok := s.parse(); ok && s != "" {
		return on
	}
	return def
}

func (s Switch) parse() (on, ok bool) {
	switch strings.ToLower(string(s)) {
	case "true", "on", "yes":
		return true, true
	case "false", "off", "no":
		return false, true
	case "":
		return false, true
	}
	return false, false
}

// SwitchOf returns the Switch set to on.
func SwitchOf(on bool) Switch {
	if on {
		return "true"
	}
	return "false"
}
