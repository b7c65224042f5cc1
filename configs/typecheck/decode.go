// Package typecheck decodes Kubernetes manifests strictly into their typed
// objects, as the API server does with strict field validation (kubectl
// apply --validate=strict): a field the type does not have, a field
// spelt in another case, a key given twice, a value of the wrong type,
// and an apiVersion or kind the check does not know are each an error
// that names the file, the document and the field.
//
// It is a module of its own, so that inferq's module does not depend on
// k8s.io/api and friends; its test checks every manifest under configs/.
package typecheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// A Document is one decoded document of a manifest file.
type Document struct {
	File  string // as given to Decode
	Index int    // 1 for the file's first document
	Line  int    // the line it starts on
	GVK   GVK
	Name  string // metadata.name; "" for a Kustomization
	// Object is the typed object it decoded into: *appsv1.StatefulSet
	// for apps/v1 StatefulSet, and so on (Kinds).
	Object any
}

// Where names the document in errors: file, line, index, kind, name.
func (d Document) Where() string {
	s := fmt.Sprintf("%s:%d: document %d", d.File, d.Line, d.Index)
	if what := strings.TrimSpace(d.GVK.Kind + " " + d.Name); what != "" {
		s += " (" + what + ")"
	}
	return s
}

// A chunk is the text of one YAML document and the line it starts on.
type chunk struct {
	line int
	text []byte
}

// split cuts a YAML stream at its document markers ("---" at the start
// of a line, alone or before a comment or content).
func split(data []byte) []chunk {
	var out []chunk
	cur := chunk{line: 1}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for i, l := range lines {
		if rest, ok := bytes.CutPrefix(l, []byte("---")); ok && (len(bytes.TrimSpace(rest)) == 0 || rest[0] == ' ' || rest[0] == '\t') {
			out = append(out, cur)
			cur = chunk{line: i + 1, text: rest} // rest is still on the marker's line
			continue
		}
		cur.text = append(cur.text, l...)
	}
	return append(out, cur)
}

// firstLine is the line of a chunk's first content: not blank, not a
// comment.
func firstLine(c chunk) int {
	for i, l := range bytes.Split(c.text, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			return c.line + i
		}
	}
	return c.line
}

// Decode decodes every document of a manifest file (YAML, one document or
// several) into the typed object of its kind. It returns the documents it
// decoded and one error per document it could not, joined; documents that
// hold only comments are skipped.
func Decode(file string, data []byte) ([]Document, error) {
	kinds := Kinds()
	var docs []Document
	var errs []error
	index := 0
	for _, c := range split(data) {
		// Blank lines before the document keep the YAML parser's line
		// numbers those of the file.
		text := append(bytes.Repeat([]byte("\n"), c.line-1), c.text...)
		j, err := yaml.YAMLToJSONStrict(text)
		if err != nil {
			index++
			errs = append(errs, fmt.Errorf("%s: not valid YAML: %w", Document{File: file, Index: index, Line: firstLine(c)}.Where(), err))
			continue
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue // comments only
		}
		index++
		d := Document{File: file, Index: index, Line: firstLine(c)}
		if err := decodeOne(kinds, &d, j); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Where(), err))
			continue
		}
		docs = append(docs, d)
	}
	return docs, errors.Join(errs...)
}

// decodeOne fills d from the JSON form of one document.
func decodeOne(kinds map[GVK]func() any, d *Document, j []byte) error {
	if t := bytes.TrimSpace(j); t[0] != '{' {
		return errors.New("not a mapping: a manifest is one object with apiVersion and kind")
	}
	var head struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
		Metadata   struct {
			Name any `json:"name"`
		} `json:"metadata"`
	}
	// Loose on purpose: the strict decode below reports what is wrong.
	_ = json.Unmarshal(j, &head)
	d.GVK.APIVersion, _ = head.APIVersion.(string)
	d.GVK.Kind, _ = head.Kind.(string)
	d.Name, _ = head.Metadata.Name.(string)
	if d.GVK.APIVersion == "" || d.GVK.Kind == "" {
		return errors.New("apiVersion or kind is missing (or not a string): not a Kubernetes manifest")
	}
	newObject, ok := kinds[d.GVK]
	if !ok {
		return unknownKind(kinds, d.GVK)
	}
	obj := newObject()
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("%s: %w", d.GVK, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("%s: %s", d.GVK, strings.Join(msgs, "; "))
	}
	if m, ok := obj.(metav1.Object); ok && m.GetName() == "" && m.GetGenerateName() == "" {
		return fmt.Errorf("%s: metadata.name is missing", d.GVK)
	}
	d.Object = obj
	return nil
}

// unknownKind says what is wrong with a GVK that Kinds lacks: an
// apiVersion that does not serve the kind, or a kind not known at all.
func unknownKind(kinds map[GVK]func() any, g GVK) error {
	var versions, all []string
	for k := range kinds {
		if k.Kind == g.Kind {
			versions = append(versions, k.APIVersion)
		}
		all = append(all, k.Kind)
	}
	if len(versions) > 0 {
		slices.Sort(versions)
		return fmt.Errorf("apiVersion %q does not serve kind %s: want %s", g.APIVersion, g.Kind, strings.Join(versions, " or "))
	}
	slices.Sort(all)
	return fmt.Errorf("kind %s (apiVersion %s) is not one the check knows (%s): add its type to Kinds in configs/typecheck/kinds.go",
		g.Kind, g.APIVersion, strings.Join(slices.Compact(all), ", "))
}
