package models

import (
	"strings"
	"testing"
)

// A model's progress switch: unset is on; true and false (and YAML 1.1's
// on/off, yes/no) are taken in any case, in the main config and in a
// repository model's config.yaml.
func TestModelProgressSwitch(t *testing.T) {
	for _, tc := range []struct {
		value string // "" leaves the field out
		want  bool
	}{
		{"", true},
		{"true", true},
		{"false", false},
		{"False", false},
		{"off", false},
		{"on", true},
		{"no", false},
		{"yes", true},
		{`"false"`, false},
	} {
		t.Run("value="+tc.value, func(t *testing.T) {
			field := ""
			if tc.value != "" {
				field = ", progress: " + tc.value
			}
			c, err := Parse([]byte("models: [{name: a, path: a.onnx" + field + "}]"))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Models[0].ProgressOn(); got != tc.want {
				t.Errorf("ProgressOn = %v, want %v", got, tc.want)
			}
			doc := "instances: 1\n"
			if tc.value != "" {
				doc += "progress: " + tc.value + "\n"
			}
			m, _, err := ParseModel([]byte(doc), "a", "a/1/model.onnx")
			if err != nil {
				t.Fatal(err)
			}
			if got := m.ProgressOn(); got != tc.want {
				t.Errorf("repository config.yaml: ProgressOn = %v, want %v", got, tc.want)
			}
		})
	}
	// A model made in code, not from a file, has progress on.
	if m := (Model{}); !m.ProgressOn() {
		t.Error("the zero Model has progress off")
	}
}

// A set switch is printed (serve --print-config) as a YAML bool; an unset
// one not at all.
func TestSwitchMarshal(t *testing.T) {
	on := NewModel("a")
	on.Progress = "Off"
	if got := mustYAML(t, on); !strings.Contains(got, "progress: false") {
		t.Errorf("set switch written as:\n%s", got)
	}
	if got := mustYAML(t, NewModel("a")); strings.Contains(got, "progress") {
		t.Errorf("unset switch written as:\n%s", got)
	}
}
