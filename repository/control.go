package repository

import (
	"context"
	"errors"

	"github.com/inferq/inferq/oip"
)

// Control is r as the gRPC server's model repository
// (oip.ModelRepository, for worker.Config.Repository): Triton's
// RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload RPCs,
// the gRPC side of Routes.
func Control(r *Repository) oip.ModelRepository { return control{r} }

type control struct{ r *Repository }

func (c control) Index(readyOnly bool) []oip.RepositoryEntry {
	idx := c.r.Index(readyOnly)
	out := make([]oip.RepositoryEntry, len(idx))
	for i, e := range idx {
		out[i] = oip.RepositoryEntry{Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason}
	}
	return out
}

func (c control) Load(ctx context.Context, name string) error {
	return controlError(c.r.Load(ctx, name))
}

func (c control) Unload(ctx context.Context, name string) error {
	return controlError(c.r.Unload(ctx, name))
}

// controlError marks err with the gRPC endpoint's error for its case, keeping
// its text.
func controlError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return markedError{err, oip.ErrRepositoryNotFound}
	case errors.Is(err, ErrNotExplicit):
		return markedError{err, oip.ErrRepositoryNotExplicit}
	}
	return err
}

// markedError is err, also matching mark for errors.Is.
type markedError struct{ err, mark error }

func (e markedError) Error() string   { return e.err.Error() }
func (e markedError) Unwrap() []error { return []error{e.err, e.mark} }
