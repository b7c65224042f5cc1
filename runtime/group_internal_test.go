package runtime

import (
	"fmt"
	"testing"

	"github.com/inferq/inferq/tensor"
)

func TestGroup(t *testing.T) {
	mk := func(dims ...int64) prepared {
		return prepared{in: []*tensor.Tensor{{Shape: dims}, {Shape: []int64{dims[0], 8}}}, rows: dims[0]}
	}
	preps := []prepared{mk(1, 1, 2), mk(1, 1, 2), mk(2, 4, 2), mk(3, 1, 2), mk(2, 3, 2), mk(1, 4, 2), mk(1, 1, 2)}
	tests := []struct {
		batchable bool
		valid     []int
		want      string
	}{
		{true, []int{0, 1, 2, 3, 4, 5, 6}, "[[0 1 3 6] [2 5] [4]]"},
		{true, []int{0, 1, 3, 6}, "[[0 1 3 6]]"},
		{true, []int{2, 0, 5, 1}, "[[2 5] [0 1]]"},
		{true, []int{4}, "[[4]]"},
		{true, nil, "[]"},
		{false, []int{0, 1, 2}, "[[0] [1] [2]]"},
	}
	for _, tt := range tests {
		s := &Session{batchable: tt.batchable}
		if got := fmt.Sprint(s.group(preps, tt.valid)); got != tt.want {
			t.Errorf("group(%v, batchable %v) = %s, want %s", tt.valid, tt.batchable, got, tt.want)
		}
	}
}
