package models

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"
)

// Model control modes (model_control_mode), Triton's names.
const (
	// ControlNone loads the repository's models at start, and only then.
	ControlNone = ControlMode("none")
	// ControlPoll rescans the repository every repository_poll and loads,
	// reloads and unloads what changed.
	ControlPoll = ControlMode("poll")
	// ControlExplicit loads and unloads models when asked (the HTTP
	// repository extension: POST /v2/repository/models/{m}/load, /unload).
	ControlExplicit = ControlMode("explicit")
)

// maxVersionsBound bounds the versions of a model a version policy
// serves (version_policy.latest, the length of version_policy.specific).
const maxVersionsBound = 64

// DefaultRepositoryPoll is repository_poll's default.
const DefaultRepositoryPoll = Duration(15 * time.Second)

// Repository configures the model repository, Triton's layout:
// DIR/<model>/<version>/model.onnx, with an optional DIR/<model>/config.yaml
// holding the fields of a models: entry (name and path are implied).
type Repository struct {
	// ModelRepository is the repository's directory; "" is none.
	ModelRepository string `yaml:"model_repository"`
	// ModelControlMode is none (the default), poll or explicit.
	ModelControlMode ControlMode `yaml:"model_control_mode"`
	// RepositoryPoll is how often poll mode rescans the repository.
	RepositoryPoll Duration `yaml:"repository_poll"`
}

// ControlMode is model_control_mode: ControlNone, ControlPoll or
// ControlExplicit.
type ControlMode string

// UnmarshalYAML refuses any other value.
func (m *ControlMode) UnmarshalYAML(n *yaml.Node) error {
	var v string
	if err := n.Decode(&v); err != nil {
		return err
	}
	switch ControlMode(v) {
	case ControlNone, ControlPoll, ControlExplicit:
		*m = ControlMode(v)
		return nil
	}
	return fmt.Errorf("line %d: model_control_mode: want %s, %s or %s", n.Line, ControlNone, ControlPoll, ControlExplicit)
}

// SetDefaults fills the control mode (none) and the poll interval.
func (r *Repository) SetDefaults() {
	if r.ModelControlMode == "" {
		r.ModelControlMode = ControlNone
	}
	if r.RepositoryPoll == 0 {
		r.RepositoryPoll = DefaultRepositoryPoll
	}
}

func (r *Repository) validate(top func(field, format string, args ...any)) {
	if r.RepositoryPoll < 0 {
		top("repository_poll", "must be positive, got %s", r.RepositoryPoll)
	}
	durAtMost(top, "repository_poll", r.RepositoryPoll, maxRepositoryPollBound, "")
	if r.ModelRepository == "" && r.ModelControlMode != ControlNone && r.ModelControlMode != "" {
		top("model_control_mode", "is %s but no model_repository is set", r.ModelControlMode)
	}
}

// VersionPolicy is which of a repository model's versions are served
// (config.yaml's version_policy, Triton's names): the Latest N (default
// 1), or the Specific ones listed. A task runs on the highest version
// loaded.
type VersionPolicy struct {
	Latest   int     `yaml:"latest"`
	Specific []int64 `yaml:"specific"`
}

// ParseModel decodes a repository model's config.yaml (the fields of a
// models: entry, plus version_policy; unknown fields are errors) into the
// model called name at path, fills its defaults and validates it. The
// file must not set a name or path other than those the layout implies.
// data is at most MaxConfigBytes (ReadConfigFile reads it so); errors name
// lines and fields, never the values of the file.
func ParseModel(data []byte, name, path string) (Model, VersionPolicy, error) {
	m, pol := NewModel(name), VersionPolicy{}
	fail := func(err error) (Model, VersionPolicy, error) {
		return Model{}, pol, fmt.Errorf("model %q: config.yaml: %w", name, err)
	}
	if len(data) > MaxConfigBytes {
		return fail(errTooLarge(int64(len(data))))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fail(decodeError(err))
	}
	if len(doc.Content) == 1 {
		body := doc.Content[0]
		if err := takePolicy(body, &pol); err != nil {
			return fail(decodeError(err))
		}
		if err := body.Decode(&m); err != nil {
			return fail(decodeError(err))
		}
	}
	if m.Name == "" { // not in the file (Model.UnmarshalYAML starts from NewModel(""))
		m.Name = name
	}
	if m.Name != name {
		return fail(errors.New("name is set to another name; the directory names the model"))
	}
	if m.Path != "" && m.Path != path {
		return fail(errors.New("path is set; the repository layout gives it (<model>/<version>/model.onnx)"))
	}
	m.Path = path
	return m, pol, CheckModel(&m)
}

// takePolicy decodes and removes the version_policy key of a mapping.
func takePolicy(n *yaml.Node, pol *VersionPolicy) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "version_policy" {
			continue
		}
		v := n.Content[i+1]
		if err := checkKnownFields(v, reflect.TypeFor[VersionPolicy]()); err != nil {
			return err
		}
		if err := v.Decode(pol); err != nil {
			return err
		}
		n.Content = append(n.Content[:i], n.Content[i+2:]...)
		switch {
		case pol.Latest < 0:
			return fmt.Errorf("line %d: version_policy.latest must be at least 1, got %d", v.Line, pol.Latest)
		case pol.Latest > maxVersionsBound:
			return fmt.Errorf("line %d: version_policy.latest must be at most %d (each version served is loaded), got %d", v.Line, maxVersionsBound, pol.Latest)
		case len(pol.Specific) > maxVersionsBound:
			return fmt.Errorf("line %d: version_policy.specific lists %d versions; at most %d (each version served is loaded)", v.Line, len(pol.Specific), maxVersionsBound)
		case pol.Latest > 0 && len(pol.Specific) > 0:
			return fmt.Errorf("line %d: version_policy: set latest or specific, not both", v.Line)
		}
		for _, n := range pol.Specific {
			if n < 1 {
				return fmt.Errorf("line %d: version_policy.specific: version %d: versions are positive integers", v.Line, n)
			}
		}
		return nil
	}
	return nil
}

// CheckModel fills m's derived defaults (queue, dlq_queue,
// unprocessable_queue) and validates it alone, as Validate does each entry
// of models:.
func CheckModel(m *Model) error {
	c := Config{Models: []Model{*m}}
	c.SetDefaults()
	*m = c.Models[0]
	var errs []error
	m.validate(func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Model: fmt.Sprintf("%q", m.Name), Field: field, Msg: fmt.Sprintf(format, args...)})
	})
	return errors.Join(errs...)
}
