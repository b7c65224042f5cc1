package examples

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/encoding/protowire"
)

// mlpReference is the mlp forward pass in float64 from the same weights.
func mlpReference(w mlpWeights, x []float32) []float64 {
	rows := len(x) / MLPInputs
	probs := make([]float64, 0, rows*MLPClasses)
	for r := range rows {
		xr := x[r*MLPInputs : (r+1)*MLPInputs]
		h := make([]float64, MLPHidden)
		for j := range h {
			s := float64(w.b1[j])
			for i, xi := range xr {
				s += float64(xi) * float64(w.w1[i*MLPHidden+j])
			}
			h[j] = max(s, 0)
		}
		logits := make([]float64, MLPClasses)
		for k := range logits {
			s := float64(w.b2[k])
			for j, hj := range h {
				s += hj * float64(w.w2[j*MLPClasses+k])
			}
			logits[k] = s
		}
		m := slices.Max(logits)
		sum := 0.0
		for k, l := range logits {
			logits[k] = math.Exp(l - m)
			sum += logits[k]
		}
		for _, e := range logits {
			probs = append(probs, e/sum)
		}
	}
	return probs
}

func uniformFloats(r *rand.Rand, n int, limit float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((2*r.Float64() - 1) * limit)
	}
	return v
}

func TestMLPMatchesReference(t *testing.T) {
	needORT(t)
	const rows = 7
	x := uniformFloats(rand.New(rand.NewPCG(1, 2)), rows*MLPInputs, 3)
	s := newSession(t, MLP(), []string{"x"}, []string{"probs"})
	in, err := ort.NewTensor(ort.NewShape(rows, MLPInputs), x)
	in = destroyLater(t, in, err)
	out := run(t, s, 1, in)[0].(*ort.Tensor[float32])
	if got, want := out.GetShape(), ort.NewShape(rows, MLPClasses); !got.Equals(want) {
		t.Fatalf("probs shape %v, want %v", got, want)
	}
	want := mlpReference(newMLPWeights(), x)
	got := out.GetData()
	for r := range rows {
		sum := 0.0
		for k := range MLPClasses {
			i := r*MLPClasses + k
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5 {
				t.Errorf("probs[%d][%d] = %v, reference %v", r, k, got[i], want[i])
			}
			sum += float64(got[i])
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("row %d sums to %v", r, sum)
		}
	}
	// The weights must make the model non-trivial: not uniform, not one-hot.
	if lo, hi := slices.Min(want), slices.Max(want); lo < 1e-4 && hi > 1-1e-4 || hi-lo < 0.05 {
		t.Errorf("reference probs span [%v, %v]: weights give a degenerate model", lo, hi)
	}
}

func TestMultiType(t *testing.T) {
	needORT(t)
	const rows = 3
	r := rand.New(rand.NewPCG(3, 4))
	ids := make([]int64, rows*MultiTypeIDs)
	for i := range ids {
		ids[i] = r.Int64N(1<<40) - 1<<39
	}
	x := uniformFloats(r, rows*MultiTypeX, 10)
	s := newSession(t, MultiType(), []string{"ids", "x"}, []string{"ids_sum", "y"})
	idsT, err := ort.NewTensor(ort.NewShape(rows, MultiTypeIDs), ids)
	idsT = destroyLater(t, idsT, err)
	xT, err := ort.NewTensor(ort.NewShape(rows, MultiTypeX), x)
	xT = destroyLater(t, xT, err)
	outs := run(t, s, 2, idsT, xT)

	sum := outs[0].(*ort.Tensor[int64])
	if got, want := sum.GetShape(), ort.NewShape(rows, 1); !got.Equals(want) {
		t.Fatalf("ids_sum shape %v, want %v", got, want)
	}
	for row, got := range sum.GetData() {
		var want int64
		for _, v := range ids[row*MultiTypeIDs : (row+1)*MultiTypeIDs] {
			want += v
		}
		if got != want {
			t.Errorf("ids_sum[%d] = %d, want %d", row, got, want)
		}
	}
	y := outs[1].(*ort.Tensor[float32])
	if got, want := y.GetShape(), ort.NewShape(rows, MultiTypeX); !got.Equals(want) {
		t.Fatalf("y shape %v, want %v", got, want)
	}
	for i, got := range y.GetData() {
		if want := x[i]*2 + 1; got != want {
			t.Errorf("y[%d] = %v, want %v", i, got, want)
		}
	}
}

// TestChannelMean runs channelmean at two image sizes: each output is the
// mean of its channel, whatever H and W.
func TestChannelMean(t *testing.T) {
	needORT(t)
	s := newSession(t, ChannelMean(), []string{"image"}, []string{"mean"})
	r := rand.New(rand.NewPCG(7, 8))
	for _, hw := range [][2]int64{{1, 1}, {5, 7}} {
		const rows = 2
		x := uniformFloats(r, int(rows*3*hw[0]*hw[1]), 1)
		in, err := ort.NewTensor(ort.NewShape(rows, 3, hw[0], hw[1]), x)
		in = destroyLater(t, in, err)
		out := run(t, s, 1, in)[0].(*ort.Tensor[float32])
		if got, want := out.GetShape(), ort.NewShape(rows, 3); !got.Equals(want) {
			t.Fatalf("%dx%d: mean shape %v, want %v", hw[0], hw[1], got, want)
		}
		plane := int(hw[0] * hw[1])
		for i, got := range out.GetData() {
			var sum float64
			for _, v := range x[i*plane : (i+1)*plane] {
				sum += float64(v)
			}
			if want := sum / float64(plane); math.Abs(float64(got)-want) > 1e-5 {
				t.Errorf("%dx%d: mean[%d] = %v, want %v", hw[0], hw[1], i, got, want)
			}
		}
	}
}

// TestModelSignatures checks names, types and the symbolic batch dim as ORT
// reads them.
func TestModelSignatures(t *testing.T) {
	needORT(t)
	type io struct {
		name  string
		dtype DataType
		dims  ort.Shape
	}
	tests := []struct {
		name          string
		model         []byte
		inputs, outpt []io
	}{
		{MLPName, MLP(), []io{{"x", Float, ort.NewShape(-1, 16)}}, []io{{"probs", Float, ort.NewShape(-1, 4)}}},
		{MultiTypeName, MultiType(),
			[]io{{"ids", Int64, ort.NewShape(-1, 8)}, {"x", Float, ort.NewShape(-1, 4)}},
			[]io{{"ids_sum", Int64, ort.NewShape(-1, 1)}, {"y", Float, ort.NewShape(-1, 4)}}},
		{"identity-string", Identity("identity-string", String, []int64{2}),
			[]io{{"in", String, ort.NewShape(-1, 2)}}, []io{{"out", String, ort.NewShape(-1, 2)}}},
		{ChannelMeanName, ChannelMean(), []io{{"image", Float, ort.NewShape(-1, 3, -1, -1)}}, []io{{"mean", Float, ort.NewShape(-1, 3)}}},
		{"identity-scalar-items", Identity("identity-scalar-items", Int8, nil),
			[]io{{"in", Int8, ort.NewShape(-1)}}, []io{{"out", Int8, ort.NewShape(-1)}}},
	}
	check := func(t *testing.T, kind string, got []ort.InputOutputInfo, want []io) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%d %ss, want %d", len(got), kind, len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.Name != w.name || g.DataType != ort.TensorElementDataType(w.dtype) || !g.Dimensions.Equals(w.dims) {
				t.Errorf("%s %d: %s %v %v, want %s %v %v", kind, i, g.Name, g.DataType, g.Dimensions, w.name, w.dtype, w.dims)
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ins, outs, err := ort.GetInputOutputInfoWithONNXData(tt.model)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "input", ins, tt.inputs)
			check(t, "output", outs, tt.outpt)
		})
	}
}

// identityData returns n elements of dtype as raw little-endian bytes, with
// the extremes of the type first. Bool bytes are 0 or 1.
func identityData(dtype DataType, n int) []byte {
	r := rand.New(rand.NewPCG(5, uint64(dtype)))
	size := dtype.Size()
	b := make([]byte, n*size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	switch dtype {
	case Bool:
		for i := range b {
			b[i] &= 1
		}
	default:
		// All bits set, then only the top one: -1 and the minimum of signed
		// types, the maximum and 2^(bits-1) of unsigned ones, NaN and -0 of
		// floating ones. Identity must copy them bit for bit.
		for i := range size {
			b[i] = 0xff
			b[size+i] = 0
		}
		b[2*size-1] = 0x80
	}
	return b
}

func TestIdentityRoundTrip(t *testing.T) {
	needORT(t)
	perItem := []int64{3, 2}
	const batch = 2
	shape := ort.NewShape(batch, perItem[0], perItem[1])
	n := int(shape.FlattenedSize())
	for _, dtype := range DataTypes() {
		t.Run(dtype.String(), func(t *testing.T) {
			s := newSession(t, Identity("identity-"+dtype.String(), dtype, perItem), []string{"in"}, []string{"out"})
			if dtype == String {
				want := []string{"", "a", "héllo", "日本語", "with\x00nul", "tab\tand\nnewline",
					"x", "yy", "zzz", "longer string of some length", "🙂", "end"}
				in, err := ort.NewStringTensor(shape)
				in = destroyLater(t, in, err)
				if err := in.SetContents(want); err != nil {
					t.Fatal(err)
				}
				out := run(t, s, 1, in)[0].(*ort.StringTensor)
				got, err := out.GetContents()
				if err != nil {
					t.Fatal(err)
				}
				if !out.GetShape().Equals(shape) {
					t.Fatalf("shape %v, want %v", out.GetShape(), shape)
				}
				for i, w := range want {
					// onnxruntime_go v1.35.0 passes strings to ORT as C strings,
					// so one is cut at its first NUL; ORT itself is not at fault.
					cut, _, hasNUL := strings.Cut(w, "\x00")
					switch {
					case got[i] == w:
					case hasNUL && got[i] == cut:
						t.Logf("element %d %q came back as %q: cut at NUL by onnxruntime_go", i, w, got[i])
					default:
						t.Errorf("element %d = %q, want %q", i, got[i], w)
					}
				}
				return
			}
			// Raw tensors for every numeric type, so that values are compared
			// bit for bit (NaN included) and FLOAT16 is covered too.
			data := identityData(dtype, n)
			typ := ort.TensorElementDataType(dtype)
			in, err := ort.NewCustomDataTensor(shape, data, typ)
			in = destroyLater(t, in, err)
			out, err := ort.NewCustomDataTensor(shape, make([]byte, len(data)), typ)
			out = destroyLater(t, out, err)
			runInto(t, s, []ort.Value{in}, []ort.Value{out})
			if !bytes.Equal(out.GetData(), data) {
				t.Errorf("out % x, want % x", out.GetData(), data)
			}
		})
	}
}

func TestIdentityPanicsOnUnknownType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Identity of DataType(14) did not panic")
		}
	}()
	Identity("bad", DataType(14), nil)
}

func TestDeterministic(t *testing.T) {
	gens := map[string]func() []byte{
		MLPName:       MLP,
		MultiTypeName: MultiType,
		"identity":    func() []byte { return Identity("id", Float16, []int64{4, 4}) },
	}
	for name, gen := range gens {
		if a, b := gen(), gen(); !bytes.Equal(a, b) {
			t.Errorf("%s: two generations differ (%d and %d bytes)", name, len(a), len(b))
		}
	}
}

// TestEncoding reads a model back with protowire: no ORT needed.
func TestEncoding(t *testing.T) {
	// TensorShapeProto.Dimension{dim_param: "N"} and {dim_value: 16}.
	if got := (dim{param: "N"}).appendTo(nil); !bytes.Equal(got, []byte{0x12, 1, 'N'}) {
		t.Errorf("dim_param N = % x", got)
	}
	if got := (dim{value: 16}).appendTo(nil); !bytes.Equal(got, []byte{0x08, 16}) {
		t.Errorf("dim_value 16 = % x", got)
	}

	b := MLP()
	fields := map[protowire.Number][]byte{}
	var irVersion uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				t.Fatal(protowire.ParseError(m))
			}
			if num == fModelIRVersion {
				irVersion = v
			}
			b = b[m:]
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				t.Fatal(protowire.ParseError(m))
			}
			fields[num] = v
			b = b[m:]
		default:
			t.Fatalf("field %d has wire type %d", num, typ)
		}
	}
	if irVersion != uint64(onnxIRVersion) {
		t.Errorf("ir_version %d", irVersion)
	}
	if string(fields[fModelProducerName]) != producerName {
		t.Errorf("producer_name %q", fields[fModelProducerName])
	}
	// OperatorSetIdProto{version: 17}, default domain.
	if got := fields[fModelOpsetImport]; !bytes.Equal(got, []byte{0x10, byte(onnxOpsetVersion)}) {
		t.Errorf("opset_import % x", got)
	}
	if len(fields[fModelGraph]) == 0 {
		t.Error("no graph")
	}
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	paths, err := Write(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "mlp.onnx"), filepath.Join(dir, "multitype.onnx")}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	for i, gen := range []func() []byte{MLP, MultiType} {
		got, err := os.ReadFile(paths[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, gen()) {
			t.Errorf("%s differs from its generator", paths[i])
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("dir holds %d entries, want %d (temporary files left?)", len(entries), len(want))
	}
	// A second Write replaces the files.
	if _, err := Write(dir, false); err != nil {
		t.Fatal(err)
	}
	if errNoORT == nil {
		sess, err := ort.NewDynamicAdvancedSession(paths[0], []string{"x"}, []string{"probs"}, nil)
		destroyLater(t, sess, err)
	}
}

// TestAttributeKinds runs a model through ORT that uses every attribute kind
// the encoder writes: FLOAT, STRING, TENSOR, FLOATS here, INT and INTS in the
// example models.
func TestAttributeKinds(t *testing.T) {
	needORT(t)
	g := &graph{name: "attributes"}
	g.inputs = []*valueInfo{{name: "x", dtype: Float, shape: batched(2)}}
	g.outputs = []*valueInfo{
		{name: "y", dtype: Float, shape: batched(2)},
		{name: "ci", dtype: Int64, shape: []dim{{value: 2}}},
		{name: "cs1", dtype: String, shape: []dim{{value: 1}}},
	}
	ints := &tensor{name: "ints", dtype: Int64, dims: []int64{2}, raw: []byte{3, 0, 0, 0, 0, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	axes := g.init(&tensor{name: "axes", dtype: Int64, dims: []int64{1}, raw: make([]byte, 8)})
	g.add(&node{op: "LeakyRelu", inputs: []string{"x"}, outputs: []string{"leaky"}, attrs: []*attribute{attrFloat("alpha", 0.5)}})
	g.add(&node{op: "Constant", outputs: []string{"cf"}, attrs: []*attribute{attrFloats("value_floats", 1, 2)}})
	g.add(&node{op: "Add", inputs: []string{"leaky", "cf"}, outputs: []string{"y"}})
	g.add(&node{op: "Constant", outputs: []string{"ci"}, attrs: []*attribute{attrTensor("value", ints)}})
	g.add(&node{op: "Constant", outputs: []string{"cs"}, attrs: []*attribute{attrString("value_string", "héllo")}})
	g.add(&node{op: "Unsqueeze", inputs: []string{"cs", axes}, outputs: []string{"cs1"}})

	s := newSession(t, marshal(&model{graph: g}), []string{"x"}, []string{"y", "ci", "cs1"})
	x, err := ort.NewTensor(ort.NewShape(1, 2), []float32{-2, 2})
	x = destroyLater(t, x, err)
	outs := run(t, s, 3, x)
	if got, want := outs[0].(*ort.Tensor[float32]).GetData(), []float32{0, 4}; !slices.Equal(got, want) {
		t.Errorf("y = %v, want %v (LeakyRelu alpha 0.5 plus value_floats [1 2])", got, want)
	}
	if got, want := outs[1].(*ort.Tensor[int64]).GetData(), []int64{3, -4}; !slices.Equal(got, want) {
		t.Errorf("ci = %v, want %v", got, want)
	}
	cs, err := outs[2].(*ort.StringTensor).GetContents()
	if err != nil || !slices.Equal(cs, []string{"héllo"}) {
		t.Errorf("cs1 = %q, %v; want [héllo]", cs, err)
	}
}

// MLPVariant 0 is MLP; another variant has MLP's size (same signature)
// but other bytes (other weights), and is deterministic.
func TestMLPVariant(t *testing.T) {
	if !bytes.Equal(MLPVariant(0), MLP()) {
		t.Error("variant 0 differs from MLP")
	}
	v1 := MLPVariant(1)
	if len(v1) != len(MLP()) || bytes.Equal(v1, MLP()) {
		t.Errorf("variant 1: %d bytes, MLP %d; equal %v", len(v1), len(MLP()), bytes.Equal(v1, MLP()))
	}
	if !bytes.Equal(v1, MLPVariant(1)) {
		t.Error("variant 1 is not deterministic")
	}
}
