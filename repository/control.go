package repository

import (
	"context"
	"errors"

	"github.com/inferq/inferq/consumer"
)

// Control is r as the gRPC server's model repository
// (consumer.ModelRepository, for worker.Config.Repository): Triton's
// RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload RPCs,
// the gRPC side of Routes.
func Control(r *Repository) consumer.ModelRepository { return control{r} }

type control struct{ r *Repository }

func (c control) Index(readyOnly bool) []consumer.RepositoryEntry {
	idx := c.r.Index(readyOnly)
	out := make([]consumer.RepositoryEntry, len(idx))
	for i, e := range idx {
		out[i] = consumer.RepositoryEntry{Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason}
	}
	return out
}

func (c control) Load(ctx context.Context, name string) error {
	return controlError(c.r.Load(ctx, name))
}

func (c control) Unload(ctx context.Context, name string) error {
	return controlError(c.r.Unload(ctx, name))
}

// controlError marks err with the consumer's error for its case, keeping
// its text.
func controlError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return markedError{err, consumer.ErrRepositoryNotFound}
	case errors.Is(err, ErrNotExplicit):
		return markedError{err, consumer.ErrRepositoryNotExplicit}
	}
	return err
}

// markedError is err, also matching mark for errors.Is.
type markedError struct{ err, mark error }

func (e markedError) Error() string   { return e.err.Error() }
func (e markedError) Unwrap() []error { return []error{e.err, e.mark} }
