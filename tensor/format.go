package tensor

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatValues prints up to limit of t's elements in row-major order, then
// how many there are when more: "[0.1 0.2 ... (1000 values)]". A tensor
// whose data does not match its datatype prints the error in parentheses.
func FormatValues(t Tensor, limit int) string {
	vals, n, err := elementStrings(t, limit)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if n > limit {
		vals = append(vals, fmt.Sprintf("... (%d values)", n))
	}
	return "[" + strings.Join(vals, " ") + "]"
}

// elementStrings formats the first limit elements of t and counts all.
func elementStrings(t Tensor, limit int) ([]string, int, error) {
	switch t.DType {
	case FP32:
		return formatEach(t, limit, func(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) })
	case FP64:
		return formatEach(t, limit, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) })
	case FP16:
		n := len(t.Data) / 2
		out := make([]string, min(n, limit))
		for i := range out {
			out[i] = strconv.FormatFloat(float64(HalfToFloat32(uint16(t.Data[2*i])|uint16(t.Data[2*i+1])<<8)), 'g', 5, 32)
		}
		return out, n, nil
	case BYTES:
		v, err := BytesElements(t)
		return formatSlice(v, limit, func(e []byte) string { return strconv.Quote(string(e)) }), len(v), err
	case BOOL:
		return formatEach(t, limit, strconv.FormatBool)
	case INT8:
		return formatEach(t, limit, func(v int8) string { return strconv.Itoa(int(v)) })
	case INT16:
		return formatEach(t, limit, func(v int16) string { return strconv.Itoa(int(v)) })
	case INT32:
		return formatEach(t, limit, func(v int32) string { return strconv.Itoa(int(v)) })
	case INT64:
		return formatEach(t, limit, func(v int64) string { return strconv.FormatInt(v, 10) })
	case UINT8:
		return formatEach(t, limit, func(v uint8) string { return strconv.FormatUint(uint64(v), 10) })
	case UINT16:
		return formatEach(t, limit, func(v uint16) string { return strconv.FormatUint(uint64(v), 10) })
	case UINT32:
		return formatEach(t, limit, func(v uint32) string { return strconv.FormatUint(uint64(v), 10) })
	case UINT64:
		return formatEach(t, limit, func(v uint64) string { return strconv.FormatUint(v, 10) })
	}
	return nil, 0, fmt.Errorf("datatype %s", t.DType)
}

func formatEach[T Element](t Tensor, limit int, f func(T) string) ([]string, int, error) {
	v, err := Values[T](t)
	return formatSlice(v, limit, f), len(v), err
}

func formatSlice[T any](v []T, limit int, f func(T) string) []string {
	out := make([]string, min(len(v), limit))
	for i := range out {
		out[i] = f(v[i])
	}
	return out
}
