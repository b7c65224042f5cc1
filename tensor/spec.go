package tensor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseShape reads dims written as 1,16 or 1x16 (spaces allowed): every
// dim a positive integer, at least one.
func ParseShape(s string) ([]int64, error) {
	var dims []int64
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == 'x' || r == 'X' }) {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("dim %q: want a positive integer", f)
		}
		dims = append(dims, n)
	}
	if len(dims) == 0 {
		return nil, errors.New("no dims")
	}
	return dims, nil
}

// ParseSpec reads an input written as NAME:DTYPE:DIMS, NAME:DIMS or DIMS
// (DIMS as ParseShape reads them); defName and defDType fill what is left
// out. The datatype is case-insensitive.
func ParseSpec(s, defName, defDType string) (TensorInfo, error) {
	parts := strings.Split(s, ":")
	ti := TensorInfo{Name: defName}
	dt := defDType
	switch len(parts) {
	case 1:
	case 2:
		ti.Name = parts[0]
	case 3:
		ti.Name, dt = parts[0], parts[1]
	default:
		return ti, errors.New("want NAME:DTYPE:DIMS, NAME:DIMS or DIMS")
	}
	d, err := ParseDType(strings.ToUpper(dt))
	if err != nil {
		return ti, fmt.Errorf("datatype %q: want BOOL, INT8..INT64, UINT8..UINT64, FP16, FP32 or FP64", dt)
	}
	ti.DType = d
	if ti.Dims, err = ParseShape(parts[len(parts)-1]); err != nil {
		return ti, err
	}
	if ti.Name == "" {
		return ti, errors.New("empty input name")
	}
	return ti, nil
}
