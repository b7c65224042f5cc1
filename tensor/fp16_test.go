package tensor_test

import (
	"math"
	"testing"

	"github.com/inferq/inferq/tensor"
)

func TestHalfConversions(t *testing.T) {
	for h := range 1 << 16 {
		f := tensor.HalfToFloat32(uint16(h))
		if f != f {
			if back := tensor.Float32ToHalf(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, back)
			}
			continue
		}
		if back := tensor.Float32ToHalf(f); back != uint16(h) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, back)
		}
	}
	// Rounding: between consecutive positive halves a and b, the midpoint
	// goes to the even one, and anything off it to the nearer one.
	for h := uint16(0); h < 0x7bff; h++ {
		a, b := tensor.HalfToFloat32(h), tensor.HalfToFloat32(h+1)
		mid := (a + b) / 2 // exact: 12 significant bits
		even := h
		if h&1 == 1 {
			even = h + 1
		}
		if got := tensor.Float32ToHalf(mid); got != even {
			t.Fatalf("midpoint of %#04x,%#04x -> %#04x, want %#04x", h, h+1, got, even)
		}
		if got := tensor.Float32ToHalf(math.Nextafter32(mid, 0)); got != h {
			t.Fatalf("below midpoint of %#04x -> %#04x", h, got)
		}
		if got := tensor.Float32ToHalf(math.Nextafter32(mid, 1e9)); got != h+1 {
			t.Fatalf("above midpoint of %#04x -> %#04x", h, got)
		}
	}
	if got := tensor.Float32ToHalf(1e6); got != 0x7c00 {
		t.Errorf("1e6 -> %#04x, want +Inf", got)
	}
	if got := tensor.Float32ToHalf(-1e-10); got != 0x8000 {
		t.Errorf("-1e-10 -> %#04x, want -0", got)
	}
}
