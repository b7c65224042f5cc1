package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/inferq/inferq/tensor"
)

func TestParseShapes(t *testing.T) {
	for _, tt := range []struct {
		vals []string
		want string // the inputs and dims parsed, or the error's text
	}{
		{[]string{"input=1,3,224,224"}, "input[1 3 224 224]"},
		{[]string{" x = 1, 16 ", "ids=1,8"}, "x[1 16] ids[1 8]"},
		{[]string{"a=b=1,2"}, "a=b[1 2]"}, // the last '=' splits: names may hold one
		{[]string{"1,3,224,224"}, `--shape "1,3,224,224": want INPUT=D1,D2,...`},
		{[]string{"=1,2"}, `--shape "=1,2": no input name`},
		{[]string{"x="}, "--shape x=: no dims"},
		{[]string{"x=1,,3"}, `--shape x=1,,3: dim 1 "" is not an integer`},
		{[]string{"x=1,3x3"}, `--shape x=1,3x3: dim 1 "3x3" is not an integer`},
		{[]string{"x=1,0"}, "--shape x=1,0: dim 1 is 0; want a positive size"},
		{[]string{"x=1,-4"}, "--shape x=1,-4: dim 1 is -4; want a positive size"},
		{[]string{"x=1,99999999999999999999"}, "is not an integer"},
		{[]string{"x=1,2", "x=1,3"}, `--shape x=1,3: input "x" is also given by --shape x=1,2`},
	} {
		args, err := parseShapes(tt.vals)
		got := ""
		if err != nil {
			if !errors.Is(err, ErrShape) {
				t.Errorf("%q: error %v does not wrap ErrShape", tt.vals, err)
			}
			got = err.Error()
		} else {
			var parts []string
			for _, a := range args {
				parts = append(parts, fmt.Sprintf("%s%v", a.input, a.dims))
			}
			got = strings.Join(parts, " ")
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("%q: got %q, want %q", tt.vals, got, tt.want)
		}
	}
}

// An image model with a dynamic batch, fixed channels and dynamic sides,
// a model whose dim 0 is fixed, and one of two inputs.
var (
	imageIn = []tensor.TensorInfo{{Name: "image", DType: tensor.FP32, Dims: []int64{-1, 3, -1, -1}}}
	fixedIn = []tensor.TensorInfo{{Name: "image", DType: tensor.FP32, Dims: []int64{2, 3, -1, -1}}}
	cubeIn  = []tensor.TensorInfo{{Name: "v", DType: tensor.FP32, Dims: []int64{-1, -1, -1}}}
	twoIn   = []tensor.TensorInfo{{Name: "ids", DType: tensor.INT64, Dims: []int64{-1, -1}}, {Name: "mask", DType: tensor.BOOL, Dims: []int64{-1, -1}}}
)

func TestResolveShape(t *testing.T) {
	for _, tt := range []struct {
		name string
		info []tensor.TensorInfo
		vals []string
		want string // the task's dims per input, or the error's text
	}{
		{"defaults", imageIn, nil, "[1 3 1 1]"},
		{"given", imageIn, []string{"image=1,3,224,224"}, "[1 3 224 224]"},
		{"fixed dim 0 kept", fixedIn, nil, "[2 3 1 1]"},
		{"fixed dim 0 given", fixedIn, []string{"image=2,3,8,8"}, "[2 3 8 8]"},
		{"one of two inputs", twoIn, []string{"mask=1,128"}, "[1 1] [1 128]"},
		{"other model's input", imageIn, []string{"ids=1,4"}, "[1 3 1 1]"}, // left to resolveShapes
		{"rank", imageIn, []string{"image=1,3,224"}, "--shape image=1,3,224: model m input image FP32 [-1,3,-1,-1]: 3 dims given, the input has 4"},
		{"rank over", imageIn, []string{"image=1,3,2,2,2"}, "5 dims given, the input has 4"},
		{"fixed dim", imageIn, []string{"image=1,4,224,224"}, "dim 1 is 4; the model fixes it at 3"},
		{"fixed dim 0", fixedIn, []string{"image=1,3,8,8"}, "dim 0 is 1; the model fixes it at 2"},
		{"batch dim", imageIn, []string{"image=8,3,224,224"}, "dim 0 is 8; it is the batch dim, one row per task"},
		{"typo over the cap", imageIn, []string{"image=1,3,224000,224"}, fmt.Sprintf("dim 2 is 224000, over the bench's cap of %d for a dynamic dim", MaxDynamicDim)},
		{"at the cap", twoIn, []string{fmt.Sprintf("ids=1,%d", MaxDynamicDim)}, fmt.Sprintf("[1 %d] [1 1]", MaxDynamicDim)},
		{"bytes over the cap", imageIn, []string{"image=1,3,4096,4096"}, "image FP32 [-1,3,-1,-1]: one task's input would hold 50331648 elements of 4 bytes, over the bench's cap of 64 MiB per input"},
		{"bytes at the cap", cubeIn, []string{"v=1,4096,4096"}, "[1 4096 4096]"},
		{"bytes a row over the cap", cubeIn, []string{"v=1,4096,4097"}, "one task's input would hold 16781312 elements of 4 bytes, over"},
		{"elements far over", cubeIn, []string{"v=1,65536,65536"}, "would hold 4294967296 elements"},
		{"elements overflow", []tensor.TensorInfo{{Name: "r6", DType: tensor.UINT8, Dims: []int64{-1, -1, -1, -1, -1, -1}}},
			[]string{"r6=1,65536,65536,65536,65536,65536"}, "would hold more than 2^62 elements of 1 bytes"},
		{"bool bytes", twoIn, []string{"mask=1,65536"}, "[1 1] [1 65536]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.info[0].Dims)
			args, err := parseShapes(tt.vals)
			if err != nil {
				t.Fatal(err)
			}
			ts, err := resolveShape("m", tt.info, args)
			got := ""
			if err != nil {
				if !errors.Is(err, ErrShape) {
					t.Errorf("error %v does not wrap ErrShape", err)
				}
				got = err.Error()
			} else {
				var parts []string
				for i, in := range ts.inputs {
					if in.Name != tt.info[i].Name || in.DType != tt.info[i].DType {
						t.Errorf("input %d is %s, want %s", i, in, tt.info[i])
					}
					parts = append(parts, fmt.Sprint(in.Dims))
				}
				got = strings.Join(parts, " ")
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if !slices.Equal(tt.info[0].Dims, before) {
				t.Errorf("resolveShape changed the model's dims to %v", tt.info[0].Dims)
			}
		})
	}
}

func TestResolveShapes(t *testing.T) {
	infos := map[string][]tensor.TensorInfo{"img": imageIn, "txt": twoIn}
	inputs := func(m string) ([]tensor.TensorInfo, error) {
		if in, ok := infos[m]; ok {
			return in, nil
		}
		return nil, fmt.Errorf("model %q: no such file", m)
	}
	for _, tt := range []struct {
		models []string
		vals   []string
		want   string
	}{
		{[]string{"img", "txt"}, []string{"image=1,3,32,32", "ids=1,7"}, "img: image FP32 [1,3,32,32] (--shape) | txt: ids INT64 [1,7] (--shape), mask BOOL [1,1] (dynamic dims 1 set to 1: --shape mask=1,D1 sets them)"},
		{[]string{"img"}, nil, "img: image FP32 [1,3,1,1] (dynamic dims 2,3 set to 1: --shape image=1,3,D2,D3 sets them)"},
		{[]string{"img", "txt"}, []string{"image=1,3,32,32", "input=1,3,32,32"}, `--shape input=1,3,32,32: no model measured has an input "input"; inputs: img (image FP32 [-1,3,-1,-1]); txt (ids INT64 [-1,-1], mask BOOL [-1,-1])`},
		{[]string{"img", "gone"}, nil, `model "gone": no such file`},
	} {
		args, err := parseShapes(tt.vals)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		shapes, err := resolveShapes(tt.models, inputs, args)
		if err != nil {
			got = err.Error()
		} else {
			var lines []string
			for _, m := range tt.models {
				lines = append(lines, shapes[m].describe())
			}
			got = strings.Join(lines, " | ")
		}
		if got != tt.want {
			t.Errorf("%v %q:\n got %s\nwant %s", tt.models, tt.vals, got, tt.want)
		}
	}
}
