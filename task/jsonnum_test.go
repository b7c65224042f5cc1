package task

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/inferq/inferq/tensor"
)

// randomDecimal returns a JSON number text with varied digit counts and
// exponents, biased towards the hard cases (many digits, float32
// midpoints, extremes).
func randomDecimal(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0: // float32 values in shortest form: the common case
		f := math.Float32frombits(r.Uint32())
		if f != f || math.IsInf(float64(f), 0) {
			f = 1.5
		}
		return strconv.FormatFloat(float64(f), 'g', -1, 32)
	case 1: // float64 shortest
		f := math.Float64frombits(r.Uint64())
		if f != f || math.IsInf(f, 0) {
			f = -2.5
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	case 2: // float32 midpoints written exactly-ish
		f := math.Float32frombits(r.Uint32() & 0x7f7fffff)
		next := math.Nextafter32(f, float32(math.Inf(1)))
		mid := (float64(f) + float64(next)) / 2
		return strconv.FormatFloat(mid, 'g', r.IntN(20)+1, 64)
	case 3: // normalised pixels
		return strconv.FormatFloat(r.NormFloat64(), 'f', r.IntN(12), 64)
	case 4: // long digit strings
		s := strconv.Itoa(r.IntN(1000))
		s += "." + strconv.FormatUint(r.Uint64(), 10) + strconv.FormatUint(r.Uint64(), 10)
		return s + "e" + strconv.Itoa(r.IntN(80)-40)
	default:
		return strconv.Itoa(r.IntN(2000000)-1000000) + "e" + strconv.Itoa(r.IntN(700)-350)
	}
}

func TestFloatConversionsMatchStrconv(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300000 {
		s := randomDecimal(r)
		b := []byte(s)
		n, end, err := scanNumber(b, 0)
		if err != nil || end != len(b) {
			t.Fatalf("scanNumber(%q) = end %d, %v", s, end, err)
		}
		want32, err32 := strconv.ParseFloat(s, 32)
		got32, ok := n.toFloat32(b)
		if ok != (err32 == nil) || ok && math.Float32bits(got32) != math.Float32bits(float32(want32)) {
			t.Fatalf("toFloat32(%q) = %v %v, strconv %v %v", s, got32, ok, float32(want32), err32)
		}
		want64, err64 := strconv.ParseFloat(s, 64)
		got64, ok := n.toFloat64(b)
		if ok != (err64 == nil) || ok && math.Float64bits(got64) != math.Float64bits(want64) {
			t.Fatalf("toFloat64(%q) = %v %v, strconv %v %v", s, got64, ok, want64, err64)
		}
	}
}

func TestIntegerConversions(t *testing.T) {
	for _, c := range []struct {
		in   string
		dt   tensor.DType
		want int64 // as the little-endian value sign-extended
		err  string
	}{
		{"0", tensor.UINT8, 0, ""},
		{"255", tensor.UINT8, 255, ""},
		{"256", tensor.UINT8, 0, "256 is out of range for UINT8"},
		{"300", tensor.UINT8, 0, "300 is out of range for UINT8"},
		{"-1", tensor.UINT8, 0, "out of range"},
		{"-0", tensor.UINT8, 0, ""},
		{"-128", tensor.INT8, -128, ""},
		{"-129", tensor.INT8, 0, "out of range"},
		{"127", tensor.INT8, 127, ""},
		{"2.0", tensor.INT32, 2, ""},
		{"1e3", tensor.INT16, 1000, ""},
		{"1.5", tensor.INT64, 0, "1.5 is not an integer (INT64)"},
		{"1e-3", tensor.INT64, 0, "not an integer"},
		{"9223372036854775807", tensor.INT64, math.MaxInt64, ""},
		{"-9223372036854775808", tensor.INT64, math.MinInt64, ""},
		{"9223372036854775808", tensor.INT64, 0, "out of range"},
		{"18446744073709551615", tensor.UINT64, -1, ""},
		{"18446744073709551616", tensor.UINT64, 0, "out of range"},
		{"1.8446744073709551615e19", tensor.UINT64, -1, ""},
		{"123456789012345678901234567890", tensor.UINT64, 0, "out of range"},
		{"1e1000000000", tensor.INT64, 0, "out of range"},
		{"0e1000000000", tensor.INT64, 0, ""},
		{"NaN", tensor.INT32, 0, "not an integer"},
		{"65535", tensor.UINT16, 65535, ""},
		{"4294967295", tensor.UINT32, 4294967295, ""},
		{"-2147483648", tensor.INT32, math.MinInt32, ""},
		{"-32769", tensor.INT16, 0, "out of range"},
		// Each integer datatype's bounds, one step inside and outside.
		{"128", tensor.INT8, 0, "128 is out of range for INT8"},
		{"32767", tensor.INT16, 32767, ""},
		{"32768", tensor.INT16, 0, "32768 is out of range for INT16"},
		{"-32768", tensor.INT16, math.MinInt16, ""},
		{"2147483647", tensor.INT32, math.MaxInt32, ""},
		{"2147483648", tensor.INT32, 0, "2147483648 is out of range for INT32"},
		{"-2147483649", tensor.INT32, 0, "-2147483649 is out of range for INT32"},
		{"-9223372036854775809", tensor.INT64, 0, "-9223372036854775809 is out of range for INT64"},
		{"65536", tensor.UINT16, 0, "65536 is out of range for UINT16"},
		{"-1", tensor.UINT16, 0, "-1 is out of range for UINT16"},
		{"4294967296", tensor.UINT32, 0, "4294967296 is out of range for UINT32"},
		{"-1", tensor.UINT32, 0, "out of range"},
		{"-1", tensor.UINT64, 0, "-1 is out of range for UINT64"},
		{"1e20", tensor.UINT64, 0, "1e20 is out of range for UINT64"},
		{"1e999", tensor.INT32, 0, "1e999 is out of range for INT32"},
		{"-1e999", tensor.INT64, 0, "-1e999 is out of range for INT64"},
		{"Infinity", tensor.INT64, 0, "Infinity is not an integer (INT64)"},
		{`"NaN"`, tensor.INT32, 0, "invalid"}, // the quoted floats are no integers
		// BOOL takes only the literals.
		{"true", tensor.BOOL, 1, ""},
		{"false", tensor.BOOL, 0, ""},
		{"1", tensor.BOOL, 0, "element 0: BOOL elements are true or false"},
		{"0", tensor.BOOL, 0, "BOOL elements are true or false"},
		{`"true"`, tensor.BOOL, 0, "BOOL elements are true or false"},
		{"null", tensor.BOOL, 0, "BOOL elements are true or false"},
	} {
		data, _, _, err := decodeArray([]byte(c.in), 0, c.dt, 8, 1)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s as %s: err %v, want %q", c.in, c.dt, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s as %s: %v", c.in, c.dt, err)
			continue
		}
		var got int64
		switch len(data) {
		case 1:
			got = int64(int8(data[0]))
			if c.dt == tensor.UINT8 {
				got = int64(data[0])
			}
		case 2:
			got = int64(int16(binary.LittleEndian.Uint16(data)))
			if c.dt == tensor.UINT16 {
				got = int64(binary.LittleEndian.Uint16(data))
			}
		case 4:
			got = int64(int32(binary.LittleEndian.Uint32(data)))
			if c.dt == tensor.UINT32 {
				got = int64(binary.LittleEndian.Uint32(data))
			}
		case 8:
			got = int64(binary.LittleEndian.Uint64(data))
		}
		if got != c.want {
			t.Errorf("%s as %s = %d, want %d", c.in, c.dt, got, c.want)
		}
	}
}

// TestFloatRange: a finite number too large for the datatype is refused
// (it would be an infinity, then NaN outputs); underflow rounds to zero as
// any decimal rounds; the non-finite values a producer writes on purpose,
// Python's bare tokens or the protobuf JSON mapping's strings, are kept.
func TestFloatRange(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, c := range []struct {
		in   string
		dt   tensor.DType
		want float64
		err  string
	}{
		{"3.4028235e38", tensor.FP32, math.MaxFloat32, ""},
		{"3.40282356e38", tensor.FP32, math.MaxFloat32, ""}, // within half an ulp: rounds down
		{"-3.40282356e38", tensor.FP32, -math.MaxFloat32, ""},
		{"3.4028236e38", tensor.FP32, 0, "element 0: 3.4028236e38 is out of range for FP32"},
		{"1e39", tensor.FP32, 0, "1e39 is out of range for FP32"},
		{"1e999", tensor.FP32, 0, "element 0: 1e999 is out of range for FP32"},
		{"-1e999", tensor.FP32, 0, "-1e999 is out of range for FP32"},
		{"1" + strings.Repeat("0", 39), tensor.FP32, 0, "is out of range for FP32"},
		{"1e308", tensor.FP32, 0, "1e308 is out of range for FP32"},
		{"1e-999", tensor.FP32, 0, ""},
		{"-1e-50", tensor.FP32, math.Copysign(0, -1), ""},
		{"0e999", tensor.FP32, 0, ""},
		{"1.7976931348623157e308", tensor.FP64, math.MaxFloat64, ""},
		{"1e39", tensor.FP64, 1e39, ""},
		{"1.8e308", tensor.FP64, 0, "element 0: 1.8e308 is out of range for FP64"},
		{"1e999", tensor.FP64, 0, "1e999 is out of range for FP64"},
		{"-1e400", tensor.FP64, 0, "-1e400 is out of range for FP64"},
		{"1e-400", tensor.FP64, 0, ""},
		// Explicit non-finite values: bare (Python's json) and quoted
		// (protobuf's JSON mapping, what inferq writes in records).
		{"NaN", tensor.FP32, nan, ""},
		{"Infinity", tensor.FP32, inf, ""},
		{"-Infinity", tensor.FP64, -inf, ""},
		{`"NaN"`, tensor.FP32, nan, ""},
		{`"Infinity"`, tensor.FP32, inf, ""},
		{`"-Infinity"`, tensor.FP32, -inf, ""},
		{`"NaN"`, tensor.FP64, nan, ""},
		{`"Infinity"`, tensor.FP64, inf, ""},
		{`"-Infinity"`, tensor.FP64, -inf, ""},
		{`"nan"`, tensor.FP32, 0, "element 0: invalid"},
		{`"inf"`, tensor.FP64, 0, "invalid"},
		{`"1"`, tensor.FP32, 0, "invalid"},
		{`"-NaN"`, tensor.FP32, 0, "invalid"},
		{`"NaN`, tensor.FP32, 0, "invalid"},
		{`"Infinity\"`, tensor.FP64, 0, "invalid"},
		{`"Infinity "`, tensor.FP64, 0, "invalid"},
		{`-"Infinity"`, tensor.FP32, 0, "invalid"},
		{`""`, tensor.FP32, 0, "invalid"},
	} {
		data, _, end, err := decodeArray([]byte(c.in), 0, c.dt, 8, 1)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s as %s: % x, err %v, want %q", c.in, c.dt, data, err, c.err)
			}
			continue
		}
		if err != nil || end != len(c.in) {
			t.Errorf("%s as %s: end %d, %v", c.in, c.dt, end, err)
			continue
		}
		var got float64
		if c.dt == tensor.FP32 {
			got = float64(math.Float32frombits(binary.LittleEndian.Uint32(data)))
		} else {
			got = math.Float64frombits(binary.LittleEndian.Uint64(data))
		}
		if !(got == c.want && math.Signbit(got) == math.Signbit(c.want) || math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("%s as %s = %v, want %v", c.in, c.dt, got, c.want)
		}
	}
	// In an array the error names the element.
	_, _, _, err := decodeArray([]byte(`[[1,2],[3,1e999]]`), 0, tensor.FP32, 16, 4)
	if err == nil || err.Error() != "element 3: 1e999 is out of range for FP32" {
		t.Errorf("nested overflow: %v", err)
	}
}

func TestStringsMatchEncodingJSON(t *testing.T) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`, `"\ud83d\u0041"`, `"é中"`} {
		got, end, err := parseString([]byte(s), 0)
		var want string
		if jerr := json.Unmarshal([]byte(s), &want); jerr != nil || err != nil || end != len(s) || got != want {
			t.Errorf("parseString(%s) = %q %d %v, encoding/json %q %v", s, got, end, err, want, jerr)
		}
		if back := string(appendString(nil, got)); json.Unmarshal([]byte(back), &want) != nil || want != got {
			t.Errorf("appendString(%q) = %s", got, back)
		}
	}
	for _, s := range []string{`"abc`, `"\x"`, `"\u12"`, "\"\x01\"", `x`} {
		if _, _, err := parseString([]byte(s), 0); err == nil {
			t.Errorf("parseString(%s) accepted", s)
		}
	}
}
