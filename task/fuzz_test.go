package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/inferq/inferq/tensor"
)

// fuzzModels are read against every task the fuzzers make.
var fuzzModels = []tensor.ModelInfo{
	mlpModel, multiModel, fixedModel,
	{Inputs: []tensor.TensorInfo{info("text", tensor.BYTES, -1)}},
	{Inputs: []tensor.TensorInfo{info("n", tensor.INT8, -1, 2)}},
	{Inputs: []tensor.TensorInfo{info("b", tensor.BOOL)}},
}

// allocBound is the most tensor memory a body of n bytes may make Inputs
// or Response allocate (JSON "0," is 2 bytes of text for 8 of FP64).
func allocBound(n int) int { return 8*n + 1024 }

// checkTensorsFrom checks decoded tensors: valid, and not much larger than
// the body they came from (binary data aliases it and costs nothing).
func checkTensorsFrom(t *testing.T, ts []tensor.Tensor, body []byte) {
	t.Helper()
	total := 0
	for _, tn := range ts {
		if err := tn.Validate(); err != nil {
			t.Fatalf("invalid tensor %v: %v", tn, err)
		}
		if !within(tn.Data, body) {
			total += cap(tn.Data)
		}
	}
	if total > allocBound(len(body)) {
		t.Fatalf("%d bytes of tensors from a %d-byte body", total, len(body))
	}
}

const fuzzLimit = 1 << 20

func FuzzParseInputs(f *testing.F) {
	for _, c := range parseCases {
		f.Add([]byte(c.body), false, 0)
	}
	for _, c := range inputCases {
		f.Add([]byte(c.body), false, 0)
	}
	for _, c := range binaryCases {
		b, _ := binaryBody(c.header, c.data)
		f.Add(b, true, len(c.header))
	}
	f.Add([]byte(`{"task_id":"t","task_name":"m","args":[[1e5,-0.0,NaN,-Infinity]],"kwargs":{"x":[[1,2]]}}`), false, 0)
	f.Add([]byte(`{"task_id":"t","task_name":"m","args":[[1e999,"NaN","-Infinity","Infinity",4e400]],"kwargs":{"b":[[1,"NaN"]]}}`), false, 0)
	f.Fuzz(func(t *testing.T, body []byte, binary bool, hl int) {
		var tags map[string]string
		if binary {
			tags = map[string]string{TagContentType: ContentTypeBinary, TagHeaderLength: strconv.Itoa(hl)}
		}
		lim := Limits{MaxTensorElements: fuzzLimit, MaxBodyBytes: 1 << 16}
		tk, err := Parse(body, tags, lim)
		switch {
		case err == nil && tk == nil, errors.Is(err, ErrUndecodable) && tk != nil:
			t.Fatalf("task %v with error %v", tk, err)
		case err != nil && !errors.Is(err, ErrUndecodable) && !errors.Is(err, ErrBadInput) && !errors.Is(err, ErrTooLarge):
			t.Fatalf("error without a sentinel: %v", err)
		}
		// The scanner agrees with encoding/json (beyond it: Python's NaN
		// and Infinity, and a depth limit).
		if !binary && !bytes.Contains(body, []byte("NaN")) && !bytes.Contains(body, []byte("Infinity")) {
			if !errors.Is(err, ErrUndecodable) && !json.Valid(body) {
				t.Fatalf("accepted invalid JSON: %v", err)
			}
			// And what encoding/json reads as a task is not undecodable.
			var env map[string]any
			if len(body) <= 1<<16 && bytes.Count(body, []byte("[")) < 500 && bytes.Count(body, []byte("{")) < 500 &&
				json.Unmarshal(body, &env) == nil {
				id, _ := env["task_id"].(string)
				name, _ := env["task_name"].(string)
				if id != "" && name != "" && errors.Is(err, ErrUndecodable) {
					t.Fatalf("valid task undecodable: %v", err)
				}
			}
		}
		if tk == nil {
			return
		}
		for _, m := range fuzzModels {
			ins, err := tk.Inputs(m, lim)
			if err != nil {
				if !errors.Is(err, ErrBadInput) {
					t.Fatalf("Inputs error without ErrBadInput: %v", err)
				}
				continue
			}
			if len(ins) != len(m.Inputs) {
				t.Fatalf("%d inputs for %d", len(ins), len(m.Inputs))
			}
			for i, in := range ins {
				if in.Name != m.Inputs[i].Name || in.DType != m.Inputs[i].DType {
					t.Fatalf("input %d = %v, model %v", i, in, m.Inputs[i])
				}
				if _, err := fitShape(m.Inputs[i], in.Shape); err != nil || len(in.Shape) != len(m.Inputs[i].Dims) {
					t.Fatalf("input %v does not fit %v", in, m.Inputs[i])
				}
			}
			checkTensorsFrom(t, ins, body)
		}
	})
}

// FuzzBinary mutates the header and the data of binary-form tasks.
func FuzzBinary(f *testing.F) {
	for _, c := range binaryCases {
		f.Add(c.header, c.data, 0)
	}
	x := tensor.NewTensor("x", []int64{2, 16}, make([]float32, 32))
	ok, tags, _ := NewTask("t", "m", []tensor.Tensor{x}, WithBinaryInputs())
	hl, _ := strconv.Atoi(tags[TagHeaderLength])
	f.Add(string(ok[:hl]), ok[hl:], 0)
	f.Add(binHeader(binTensor("half", "FP16", "[1,2]", 4), binTensor("text", "BYTES", "[1]", 6)), []byte{0, 60, 0, 60, 2, 0, 0, 0, 'h', 'i'}, 0)
	f.Fuzz(func(t *testing.T, header string, data []byte, delta int) {
		body := append([]byte(header), data...)
		tags := map[string]string{TagContentType: ContentTypeBinary, TagHeaderLength: strconv.Itoa(len(header) + delta%8)}
		lim := Limits{MaxTensorElements: fuzzLimit}
		tk, err := Parse(body, tags, lim)
		if err != nil {
			if tk == nil && !errors.Is(err, ErrUndecodable) {
				t.Fatalf("no task, error %v", err)
			}
			return
		}
		for _, m := range fuzzModels {
			ins, err := tk.Inputs(m, lim)
			if err != nil {
				if !errors.Is(err, ErrBadInput) {
					t.Fatal(err)
				}
				continue
			}
			checkTensorsFrom(t, ins, body)
			// Binary tensors take exactly the bytes after the header.
			n := 0
			for _, in := range ins {
				if within(in.Data, body) {
					n += len(in.Data)
				}
			}
			if n != len(tk.bin) {
				t.Fatalf("inputs alias %d bytes of the %d after the header", n, len(tk.bin))
			}
		}
	})
}

func FuzzParseRecord(f *testing.F) {
	r := Record{TaskID: "t", Status: StatusSuccess, Attempts: 2, Worker: "w", Timings: map[string]float64{"infer": 0.5}}
	for _, bin := range []bool{false, true} {
		outs := []tensor.Tensor{
			tensor.NewTensor("y", []int64{1, 3}, []float32{1, -2.5, 3e-9}),
			tensor.NewBytesTensor("s", []int64{2}, [][]byte{[]byte("a"), []byte("é")}),
			{Name: "h", DType: tensor.FP16, Shape: []int64{2}, Data: []byte{0, 0x3c, 0, 0xc0}},
		}
		res, b, _ := NewInferResponse("m", "1", outs, &Task{BinaryOutputs: bin}).Encode()
		r.Result, r.Binary = res, b
		body, _ := r.Encode()
		f.Add(body)
	}
	// Non-finite outputs, as written now (quoted) and before (bare).
	nf := []tensor.Tensor{
		tensor.NewTensor("y", []int64{1, 3}, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}),
		tensor.NewTensor("d", []int64{2}, []float64{math.Inf(-1), math.NaN()}),
	}
	res, _, _ := NewInferResponse("m", "1", nf, nil).Encode()
	body, _ := (&Record{TaskID: "t", Status: StatusSuccess, Result: res, Timings: map[string]float64{"infer": math.NaN()}}).Encode()
	f.Add(body)
	f.Add([]byte(`{"task_id":"t","status":"SUCCESS","result":{"outputs":[{"name":"y","datatype":"FP16","data":[NaN,-Infinity,"Infinity"]}]},"timings":{"a":Infinity,"b":"-Infinity"}}`))
	f.Add([]byte(`{"task_id": "t", "status": "FAILURE", "result": null, "created_at": "2026-06-01T12:00:00.000000+00:00", "completed_at": null, "error": "x"}`))
	f.Add([]byte(`{"task_id":"t","status":"SUCCESS","result":{"model_name":"m","outputs":[{"name":"y","datatype":"INT64","data":[[1,2],[3,4]]}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, err := ParseRecord(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		// Re-encoding reads back the same record.
		again, err := ParseRecord(append(rec.AppendJSON(nil), rec.Binary...))
		if err != nil {
			t.Fatalf("re-encoded record: %v", err)
		}
		// Strings go out as valid UTF-8: each invalid byte becomes U+FFFD.
		utf := func(s string) string { return string([]rune(s)) }
		if again.TaskID != utf(rec.TaskID) || again.Status != Status(utf(string(rec.Status))) || again.Error != utf(rec.Error) ||
			!bytes.Equal(again.Result, rec.Result) || again.Attempts != rec.Attempts || again.Worker != utf(rec.Worker) ||
			again.ResultRef != utf(rec.ResultRef) || !bytes.Equal(again.Binary, rec.Binary) {
			t.Fatalf("round trip\n%+v\n%+v", rec, again)
		}
		resp, err := rec.Response()
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		checkTensorsFrom(t, resp.Tensors(), body)
		// And the response encodes and decodes to the same tensors.
		res, bin, err := resp.Encode()
		if err != nil {
			t.Fatal(err)
		}
		// Whatever was read, inferq writes valid JSON (NaN quoted).
		if !json.Valid(res) {
			t.Fatalf("re-encoded response is not valid JSON: %s", res)
		}
		back, err := DecodeInferResponse(res, bin)
		if err != nil {
			t.Fatalf("re-encoded response: %v\n%s", err, res)
		}
		for i, o := range back.Outputs {
			w := resp.Outputs[i]
			same := len(o.Data) == len(w.Data)
			if o.DType == tensor.BYTES { // JSON text turns invalid UTF-8 into U+FFFD
				a, _ := tensor.BytesElements(o.Tensor)
				b, _ := tensor.BytesElements(w.Tensor)
				same = len(a) == len(b)
			}
			if o.Name != w.Name || o.DType != w.DType || !same {
				t.Fatalf("output %d: %v, want %v", i, o.Tensor, w.Tensor)
			}
		}
	})
}

var errNotQuoted = errors.New("not quoted")

// FuzzNumber checks the number scanner against encoding/json's grammar
// and strconv's values.
func FuzzNumber(f *testing.F) {
	for _, s := range []string{"0", "-0", "1.5", "1e3", "-1.7582911", "3.4028235e38", "1e39", "4.9e-324", "123456789012345678901234567890",
		"0.000000000000000000001234567890123", "00", "1.", ".5", "-", "1e", "NaN", "-Infinity", "18446744073709551615",
		`"NaN"`, `"Infinity"`, `"-Infinity"x`, `"Infinity`, `"nan"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		n, end, err := scanNumber(b, 0)
		skipEnd, skipErr := skipNumber(b, 0)
		if (err == nil) != (skipErr == nil) || err == nil && end != skipEnd {
			t.Fatalf("scanNumber %d %v, skipNumber %d %v", end, err, skipEnd, skipErr)
		}
		// The quoted non-finite floats: exactly three JSON strings, and
		// only where no number stands.
		if q, qend, qerr := quotedFloat(b, 0, -1, errNotQuoted); qerr == nil {
			if err == nil || q.special == 0 || !json.Valid(b[:qend]) ||
				!slices.Contains([]string{`"NaN"`, `"Infinity"`, `"-Infinity"`}, string(b[:qend])) {
				t.Fatalf("quotedFloat took %q (%c)", b[:qend], q.special)
			}
		} else if qerr != errNotQuoted || qend != -1 {
			t.Fatalf("quotedFloat changed the error: %d %v", qend, qerr)
		}
		if err != nil || end != len(b) || n.special != 0 {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("%q scanned as a number", s)
		}
		w64, e64 := strconv.ParseFloat(s, 64)
		if g, ok := n.toFloat64(b); ok != (e64 == nil) || ok && math.Float64bits(g) != math.Float64bits(w64) {
			t.Fatalf("%q: float64 %v %v, strconv %v %v", s, g, ok, w64, e64)
		}
		w32, e32 := strconv.ParseFloat(s, 32)
		if g, ok := n.toFloat32(b); ok != (e32 == nil) || ok && math.Float32bits(g) != math.Float32bits(float32(w32)) {
			t.Fatalf("%q: float32 %v %v, strconv %v %v", s, g, ok, w32, e32)
		}
		if v, err := n.toInt64(); err == nil {
			if w, err := strconv.ParseInt(s, 10, 64); err == nil && w != v {
				t.Fatalf("%q: int64 %d, strconv %d", s, v, w)
			}
		}
	})
}
