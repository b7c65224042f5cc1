package examples

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
)

// ResNet18 returns the "resnet18" model: the ResNet-18 topology of He et al.
// (torchvision's resnet18) with random weights. Input "input" FLOAT
// [N,3,224,224], output "logits" FLOAT [N,1000].
//
// Batch normalisation is folded into the convolutions: every Conv carries a
// bias, as a Conv followed by an inference-mode BatchNormalization reduces to,
// and there are no BatchNormalization nodes. Weights are He-scaled normals
// (std sqrt(2/fan_in)), the last conv of each residual branch scaled down by
// 1/sqrt(2) more, so activations stay of order one through the 8 blocks; the
// biases are normals of std 0.01. The model has 11,684,712 parameters (about
// 46.7 MB of weights) and costs 1.814 G multiply-adds per image.
//
// The weights are generated straight into the returned buffer, which is the
// only copy held.
func ResNet18() []byte {
	g, _ := resnet18Graph()
	return marshal(&model{graph: g})
}

// netStats counts what a generated network costs.
type netStats struct {
	params int64 // weights and biases
	macs   int64 // multiply-accumulates of Conv and Gemm for one item
}

// netBuilder appends layers to a graph, keeping the spatial size of the
// current activation to count multiply-adds. Weight data is not drawn here but
// later, by the initializers' fill functions in the order they are encoded, so
// the graph holds no weights.
type netBuilder struct {
	g     *graph
	r     *rand.Rand
	stats netStats
}

// normal returns a fill function writing float32 normals of the given std.
func (nb *netBuilder) normal(std float64) func([]byte) {
	r := nb.r
	return func(dst []byte) {
		for i := 0; i+4 <= len(dst); i += 4 {
			binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(float32(r.NormFloat64()*std)))
		}
	}
}

// param adds a generated FLOAT initializer.
func (nb *netBuilder) param(name string, std float64, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	nb.stats.params += n
	return nb.g.init(&tensor{name: name, dtype: Float, dims: dims, fill: nb.normal(std)})
}

// conv adds Conv(k x k, stride, padding k/2) with bias from in (cin channels,
// hw x hw) and returns its output name and spatial size. gain scales the He
// std of the weights.
func (nb *netBuilder) conv(name, in string, cin, cout, k, stride, hw int, gain float64) (string, int) {
	pad := k / 2
	outHW := (hw+2*pad-k)/stride + 1
	fanIn := float64(cin * k * k)
	w := nb.param(name+".weight", gain*math.Sqrt(2/fanIn), int64(cout), int64(cin), int64(k), int64(k))
	b := nb.param(name+".bias", 0.01, int64(cout))
	nb.stats.macs += int64(outHW * outHW * cout * cin * k * k)
	nb.g.add(&node{name: name, op: "Conv", inputs: []string{in, w, b}, outputs: []string{name},
		attrs: []*attribute{
			attrInts("kernel_shape", int64(k), int64(k)),
			attrInts("strides", int64(stride), int64(stride)),
			attrInts("pads", int64(pad), int64(pad), int64(pad), int64(pad)),
		}})
	return name, outHW
}

// op adds a node with one output named name.
func (nb *netBuilder) op(name, opType string, attrs []*attribute, inputs ...string) string {
	nb.g.add(&node{name: name, op: opType, inputs: inputs, outputs: []string{name}, attrs: attrs})
	return name
}

// basicBlock adds one BasicBlock: relu(conv3x3(relu(conv3x3(x))) + shortcut),
// the shortcut a 1x1 strided conv when the shape changes.
func (nb *netBuilder) basicBlock(prefix, in string, cin, cout, stride, hw int) (string, int) {
	h, outHW := nb.conv(prefix+".conv1", in, cin, cout, 3, stride, hw, 1)
	h = nb.op(prefix+".relu1", "Relu", nil, h)
	h, _ = nb.conv(prefix+".conv2", h, cout, cout, 3, 1, outHW, 1/math.Sqrt2)
	shortcut := in
	if stride != 1 || cin != cout {
		shortcut, _ = nb.conv(prefix+".downsample", in, cin, cout, 1, stride, hw, 1/math.Sqrt2)
	}
	h = nb.op(prefix+".add", "Add", nil, h, shortcut)
	return nb.op(prefix+".relu2", "Relu", nil, h), outHW
}

// resnet18Graph builds the ResNet-18 graph and counts its cost.
func resnet18Graph() (*graph, netStats) {
	const imageHW = 224
	g := &graph{name: ResNet18Name}
	g.inputs = []*valueInfo{{name: "input", dtype: Float, shape: batched(3, imageHW, imageHW)}}
	g.outputs = []*valueInfo{{name: "logits", dtype: Float, shape: batched(ResNetClasses)}}
	nb := &netBuilder{g: g, r: newRand(streamResNet)}

	x, hw := nb.conv("conv1", "input", 3, 64, 7, 2, imageHW, 1)
	x = nb.op("relu", "Relu", nil, x)
	x = nb.op("maxpool", "MaxPool", []*attribute{
		attrInts("kernel_shape", 3, 3),
		attrInts("strides", 2, 2),
		attrInts("pads", 1, 1, 1, 1),
	}, x)
	hw = (hw+2-3)/2 + 1
	cin := 64
	for stage, cout := range []int{64, 128, 256, 512} {
		stride := 2
		if stage == 0 {
			stride = 1
		}
		for block := range 2 {
			prefix := fmt.Sprintf("layer%d.%d", stage+1, block)
			x, hw = nb.basicBlock(prefix, x, cin, cout, stride, hw)
			cin, stride = cout, 1
		}
	}
	x = nb.op("avgpool", "GlobalAveragePool", nil, x)
	x = nb.op("flatten", "Flatten", []*attribute{attrInt("axis", 1)}, x)
	// torchvision's fc layout: weight [1000,512], applied transposed.
	w := nb.param("fc.weight", math.Sqrt(1/float64(cin)), ResNetClasses, int64(cin))
	b := nb.param("fc.bias", 0.01, ResNetClasses)
	nb.stats.macs += int64(cin * ResNetClasses)
	g.add(&node{name: "fc", op: "Gemm", inputs: []string{x, w, b}, outputs: []string{"logits"},
		attrs: []*attribute{attrInt("transB", 1)}})
	return g, nb.stats
}
