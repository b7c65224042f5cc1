package examples

import (
	"bytes"
	"crypto/sha256"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"
)

func TestResNet18Stats(t *testing.T) {
	_, st := resnet18Graph()
	// torchvision's resnet18 has 11,689,512 parameters, 9,600 of them the
	// gamma and beta of its 4,800 BN channels; folding BN leaves one bias per
	// channel instead.
	if want := int64(11_689_512 - 9_600 + 4_800); st.params != want {
		t.Errorf("params %d, want %d", st.params, want)
	}
	// 1.814 G multiply-adds per 224x224 image is the published figure.
	if st.macs < 1.80e9 || st.macs > 1.83e9 {
		t.Errorf("MACs %d, want about 1.81e9", st.macs)
	}
	t.Logf("resnet18: %d params (%.1f MB FP32), %d MACs per image", st.params, float64(st.params*4)/1e6, st.macs)
}

func TestResNet18(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and runs a 47 MB model")
	}
	start := time.Now()
	model := ResNet18()
	elapsed := time.Since(start)
	sum := sha256.Sum256(model)
	_, st := resnet18Graph()
	t.Logf("generated %d bytes in %v, sha256 %x", len(model), elapsed, sum[:8])
	if min := int(st.params * 4); len(model) < min || len(model) > min+64<<10 {
		t.Errorf("model is %d bytes, want weights (%d) plus a small graph", len(model), min)
	}
	again := sha256.Sum256(ResNet18())
	if again != sum {
		t.Fatal("two generations differ")
	}

	needORT(t)
	const batch = 2
	s := newSession(t, model, []string{"input"}, []string{"logits"})
	model = nil // let the 47 MB go; the session holds its own copy
	r := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, batch*3*224*224)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	in, err := ort.NewTensor(ort.NewShape(batch, 3, 224, 224), x)
	in = destroyLater(t, in, err)
	start = time.Now()
	out := run(t, s, 1, in)[0].(*ort.Tensor[float32])
	t.Logf("batch %d ran in %v", batch, time.Since(start))
	if got, want := out.GetShape(), ort.NewShape(batch, ResNetClasses); !got.Equals(want) {
		t.Fatalf("logits shape %v, want %v", got, want)
	}
	logits := out.GetData()
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logits[%d] = %v", i, v)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	t.Logf("logits in [%v, %v]", lo, hi)
	if hi-lo < 1e-3 {
		t.Errorf("logits all about equal: [%v, %v]", lo, hi)
	}
	if bytes.Equal(f32bytes(logits[:ResNetClasses]), f32bytes(logits[ResNetClasses:])) {
		t.Error("both images got the same logits")
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = append(b, byte(math.Float32bits(f)), byte(math.Float32bits(f)>>8),
			byte(math.Float32bits(f)>>16), byte(math.Float32bits(f)>>24))
	}
	return b
}

func BenchmarkResNet18(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		model := ResNet18()
		b.SetBytes(int64(len(model)))
	}
}
