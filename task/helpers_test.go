package task

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/inferq/inferq/tensor"
)

func info(name string, dt tensor.DType, dims ...int64) tensor.TensorInfo {
	return tensor.TensorInfo{Name: name, DType: dt, Dims: dims, ONNXType: dt.String()}
}

// Models the tests read tasks for.
var (
	mlpModel = tensor.ModelInfo{
		Inputs:  []tensor.TensorInfo{info("x", tensor.FP32, -1, 16)},
		Outputs: []tensor.TensorInfo{info("y", tensor.FP32, -1, 4)},
	}
	imageModel = tensor.ModelInfo{
		Inputs:  []tensor.TensorInfo{info("images", tensor.FP32, -1, 3, 224, 224)},
		Outputs: []tensor.TensorInfo{info("logits", tensor.FP32, -1, 1000)},
	}
	multiModel = tensor.ModelInfo{
		Inputs: []tensor.TensorInfo{
			info("ids", tensor.INT64, -1, 4),
			info("mask", tensor.BOOL, -1, 4),
			info("text", tensor.BYTES, -1),
			info("pix", tensor.UINT8, -1, 2),
			info("half", tensor.FP16, -1, 2),
		},
	}
	fixedModel = tensor.ModelInfo{
		Inputs: []tensor.TensorInfo{info("x", tensor.FP32, 1, 3)},
	}
)

// wantErr checks err against a sentinel and the substrings of its message.
func wantErr(t *testing.T, err, sentinel error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v %q", sentinel, subs)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %v", err, sentinel)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not contain %q", err, s)
		}
	}
}

// randomTensor returns a valid tensor of dt and shape with varied values
// (no NaN, whose payload JSON does not keep).
func randomTensor(r *rand.Rand, name string, dt tensor.DType, shape []int64) tensor.Tensor {
	n := int(tensor.NumElements(shape))
	switch dt {
	case tensor.BYTES:
		elems := make([][]byte, n)
		for i := range elems {
			e := make([]byte, r.IntN(12))
			for j := range e {
				e[j] = byte(r.IntN(96) + 32) // printable: JSON keeps it byte for byte
			}
			if i%3 == 0 {
				e = append(e, "é\"\\\n\x01"...)
			}
			elems[i] = e
		}
		return tensor.NewBytesTensor(name, shape, elems)
	}
	data := make([]byte, n*dt.Size())
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		switch dt {
		case tensor.BOOL:
			data[i] &= 1
		case tensor.FP32:
			f := math.Float32frombits(r.Uint32())
			if f != f {
				f = float32(math.Inf(1 - 2*(i&1)))
			}
			putFloat32(data[4*i:], f)
		case tensor.FP64:
			f := math.Float64frombits(r.Uint64())
			if f != f {
				f = 0.1
			}
			putFloat64(data[8*i:], f)
		case tensor.FP16:
			h := uint16(data[2*i]) | uint16(data[2*i+1])<<8
			if h&0x7c00 == 0x7c00 && h&0x3ff != 0 { // NaN
				data[2*i+1] &^= 0x40
			}
		}
	}
	return tensor.Tensor{Name: name, DType: dt, Shape: shape, Data: data}
}

func putFloat32(b []byte, f float32) {
	u := math.Float32bits(f)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

func putFloat64(b []byte, f float64) {
	u := math.Float64bits(f)
	for k := range 8 {
		b[k] = byte(u >> (8 * k))
	}
}

// within reports whether sub lies inside buf's memory.
func within(sub, buf []byte) bool {
	if len(sub) == 0 || len(buf) == 0 {
		return false
	}
	s, b := uintptr(unsafe.Pointer(&sub[0])), uintptr(unsafe.Pointer(&buf[0]))
	return s >= b && s+uintptr(len(sub)) <= b+uintptr(len(buf))
}

func floats(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		putFloat32(b[4*i:], v)
	}
	return b
}

// seq returns "[0,1,...,n-1]" as JSON, each value plus off.
func seq(n int, off float64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(appendFloat(nil, float64(i)+off, 64, bareNonFinite))
	}
	b.WriteByte(']')
	return b.String()
}

func seqFloats(n int, off float32) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i) + off
	}
	return floats(v...)
}
