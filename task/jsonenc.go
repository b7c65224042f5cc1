package task

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/inferq/inferq/tensor"
)

// JSON writing without reflection: tensor data is appended element by
// element straight from the raw bytes.

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD (as
// in encoding/json); U+2028 and U+2029 are escaped for JavaScript readers.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			default:
				b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// How appendData writes NaN and the infinities, which JSON numbers cannot
// carry.
const (
	// quotedNonFinite writes the strings "NaN", "Infinity", "-Infinity":
	// the protobuf JSON mapping for float and double, so a record or a
	// response is valid JSON for any reader (encoding/json refused the
	// bare tokens), and protojson and Python's json_format read the
	// strings back as floats. Results use it.
	quotedNonFinite = false
	// bareNonFinite writes the tokens NaN, Infinity, -Infinity, as
	// Python's json does in the adapter's task format. Task inputs keep
	// it: every inferq consumer, older ones too, reads them there.
	bareNonFinite = true
)

// appendFloat appends f in the shortest form that reads back to the same
// value at bitSize; NaN and the infinities quoted (see quotedNonFinite),
// or bare.
func appendFloat(b []byte, f float64, bitSize int, bare bool) []byte {
	if f-f != 0 { // NaN or an infinity: one test on the finite path
		return appendNonFinite(b, f, bare)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bitSize)
}

func appendNonFinite(b []byte, f float64, bare bool) []byte {
	var s string
	switch {
	case f != f:
		s = "NaN"
	case f > 0:
		s = "Infinity"
	default:
		s = "-Infinity"
	}
	if bare {
		return append(b, s...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendShape(b []byte, shape []int64) []byte {
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return append(b, ']')
}

// appendData appends the tensor's elements as a flat JSON array, NaN and
// the infinities bare or quoted (bareNonFinite, quotedNonFinite). The
// tensor must be valid (see tensor.Tensor.Validate).
func appendData(b []byte, t tensor.Tensor, bare bool) []byte {
	d := t.Data
	le := binary.LittleEndian
	b = append(b, '[')
	sz := t.DType.Size()
	for i := 0; i < len(d); {
		if i > 0 {
			b = append(b, ',')
		}
		switch t.DType {
		case tensor.FP32:
			b = appendFloat(b, float64(math.Float32frombits(le.Uint32(d[i:]))), 32, bare)
		case tensor.FP64:
			b = appendFloat(b, math.Float64frombits(le.Uint64(d[i:])), 64, bare)
		case tensor.FP16:
			b = appendFloat(b, float64(tensor.HalfToFloat32(le.Uint16(d[i:]))), 32, bare)
		case tensor.BOOL:
			if d[i] != 0 {
				b = append(b, "true"...)
			} else {
				b = append(b, "false"...)
			}
		case tensor.UINT8:
			b = strconv.AppendUint(b, uint64(d[i]), 10)
		case tensor.UINT16:
			b = strconv.AppendUint(b, uint64(le.Uint16(d[i:])), 10)
		case tensor.UINT32:
			b = strconv.AppendUint(b, uint64(le.Uint32(d[i:])), 10)
		case tensor.UINT64:
			b = strconv.AppendUint(b, le.Uint64(d[i:]), 10)
		case tensor.INT8:
			b = strconv.AppendInt(b, int64(int8(d[i])), 10)
		case tensor.INT16:
			b = strconv.AppendInt(b, int64(int16(le.Uint16(d[i:]))), 10)
		case tensor.INT32:
			b = strconv.AppendInt(b, int64(int32(le.Uint32(d[i:]))), 10)
		case tensor.INT64:
			b = strconv.AppendInt(b, int64(le.Uint64(d[i:])), 10)
		case tensor.BYTES:
			n := int(le.Uint32(d[i:]))
			b = appendString(b, bytesString(d[i+4:i+4+n]))
			i += 4 + n
			continue
		}
		i += sz
	}
	return append(b, ']')
}

// appendTensor appends one Open Inference Protocol tensor object, with
// "data" (non-finite floats bare or quoted, see appendData) or, when bin,
// "parameters": {"binary_data_size": n} and the raw bytes appended to
// *trailer.
func appendTensor(b []byte, t tensor.Tensor, bin, bare bool, trailer *[]byte) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return b, err
	}
	b = append(b, `{"name":`...)
	b = appendString(b, t.Name)
	b = append(b, `,"shape":`...)
	b = appendShape(b, t.Shape)
	b = append(b, `,"datatype":"`...)
	b = append(b, t.DType.String()...)
	if bin {
		b = append(b, `","parameters":{"binary_data_size":`...)
		b = strconv.AppendInt(b, int64(len(t.Data)), 10)
		*trailer = append(*trailer, t.Data...)
		return append(b, "}}"...), nil
	}
	b = append(b, `","data":`...)
	b = appendData(b, t, bare)
	return append(b, '}'), nil
}

// appendInt appends `,"key":v`.
func appendIntField(b []byte, key string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendStringField appends `,"key":"s"`.
func appendStringField(b []byte, key, s string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendString(b, s)
}

// errTensor names the tensor in an encoding error.
func errTensor(kind string, t tensor.Tensor, err error) error {
	return fmt.Errorf("%s %q: %w", kind, t.Name, err)
}

func float32frombytes(b []byte) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b))
}
