package admit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inferq/inferq/logclip"
	"github.com/inferq/inferq/models"
	"github.com/inferq/inferq/task"
	"github.com/inferq/inferq/tensor"
)

// Model is a served model as admission reads it: its configuration and
// its tensors. *consumer.Model satisfies it; a Table and an Admitted hold
// the caller's own type, so that it gets its models back as they are.
type Model interface {
	// ModelConfig is the model's configuration (name, limits, timeout,
	// batching). Admission reads it and never changes it.
	ModelConfig() *models.Model
	// ModelInfo is the model's inputs and outputs.
	ModelInfo() tensor.ModelInfo
}

// Table is the models a request may name: a queue's (by task_name), or
// every served model (HTTP and gRPC, by the URL or model_name). Build one
// with NewTable and Add; once it is shared it does not change (With and
// Without return changed copies), so readers take no lock. Its methods
// are safe for concurrent use once it is shared; Add is not.
type Table[M Model] struct {
	where  string // "queue <name>" or "this server", for errors
	byName map[string]M
	order  []M         // as added; the first answers a body too large to name one
	limits task.Limits // the loosest of its models', for the envelope
}

// NewTable returns an empty table; where names it in errors ("queue q",
// "this server").
func NewTable[M Model](where string) *Table[M] {
	return &Table[M]{where: where, byName: map[string]M{}}
}

// Add adds m, before the table is shared. A name already in the table is
// an error (its text: model "<name>" configured twice).
func (t *Table[M]) Add(m M) error {
	c := m.ModelConfig()
	if _, dup := t.byName[c.Name]; dup {
		return fmt.Errorf("model %q configured twice", c.Name)
	}
	t.byName[c.Name] = m
	t.order = append(t.order, m)
	// A model without a limit has the default one, which counts here.
	elems := c.Limits.MaxTensorElements
	if elems <= 0 {
		elems = task.DefaultMaxTensorElements
	}
	t.limits.MaxBodyBytes = max(t.limits.MaxBodyBytes, BodyLimit(c))
	t.limits.MaxTensorElements = max(t.limits.MaxTensorElements, elems)
	return nil
}

// With is a copy of t with m added (a name already in t is not added).
func (t *Table[M]) With(m M) *Table[M] {
	out := NewTable[M](t.where)
	for _, x := range t.order {
		_ = out.Add(x)
	}
	_ = out.Add(m)
	return out
}

// Without is a copy of t without the model called name.
func (t *Table[M]) Without(name string) *Table[M] {
	out := NewTable[M](t.where)
	for _, x := range t.order {
		if x.ModelConfig().Name != name {
			_ = out.Add(x)
		}
	}
	return out
}

// Model returns the model called name, and whether the table has it.
func (t *Table[M]) Model(name string) (M, bool) {
	m, ok := t.byName[name]
	return m, ok
}

// Models are the table's models in the order added. The slice is the
// table's own: the caller must not change it.
func (t *Table[M]) Models() []M { return t.order }

// First is the first model added (the zero M when there is none): a
// queue's answers for what cannot name one (its unprocessable queue, a
// body too large to read its task_name).
func (t *Table[M]) First() M {
	if len(t.order) == 0 {
		var zero M
		return zero
	}
	return t.order[0]
}

// Unknown is the error for a name the table lacks: it names the table and
// the models it has.
func (t *Table[M]) Unknown(name string) error {
	names := make([]string, 0, len(t.byName))
	for n := range t.byName {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return fmt.Errorf("unknown model %q: %s serves %s", logclip.String(name), t.where, strings.Join(names, ", "))
}
