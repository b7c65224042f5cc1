package task

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unsafe"

	"github.com/inferq/inferq/tensor"
)

// The hand-rolled decoder of (nested) JSON number arrays: it walks the
// text once and appends each element's little-endian bytes to the output,
// inferring the shape from the nesting as it goes. No []any, no []float64.
// Floats are correctly rounded: an exact fast path (Clinger's) covers the
// usual short decimals and strconv covers the rest.

// maxRank bounds the rank of a tensor read from JSON.
const maxRank = 32

// number is a scanned JSON number: mant * 10^exp with sign, or a special.
type number struct {
	mant  uint64
	exp   int
	neg   bool
	trunc bool // a non-zero digit did not fit in mant
	// special is 'N' for NaN, 'I' for (-)Infinity, 0 for a plain number.
	special byte
}

// scanNumber reads and validates the number at b[i].
func scanNumber(b []byte, i int) (number, int, error) {
	// Fast path: at most 19 digits in all, so mant cannot overflow and
	// needs no check per digit; longer numbers take scanNumberSlow.
	var n number
	start := i
	if i >= len(b) {
		return n, i, synErr(i, "unexpected end of input")
	}
	if b[i] == '-' {
		n.neg = true
		i++
	}
	if i >= len(b) || b[i]-'0' > 9 {
		return scanNumberSlow(b, start)
	}
	d0 := i
	if b[i] == '0' {
		i++
	} else {
		for ; i < len(b); i++ {
			d := b[i] - '0'
			if d > 9 {
				break
			}
			n.mant = n.mant*10 + uint64(d)
		}
	}
	digits := i - d0
	if i < len(b) && b[i] == '.' {
		i++
		f0 := i
		for ; i < len(b); i++ {
			d := b[i] - '0'
			if d > 9 {
				break
			}
			n.mant = n.mant*10 + uint64(d)
		}
		if i == f0 {
			return n, start, synErr(start, "invalid number")
		}
		n.exp = f0 - i
		digits += i - f0
	}
	if digits > 19 {
		return scanNumberSlow(b, start)
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		e, end, err := scanExponent(b, i+1)
		if err != nil {
			return n, start, synErr(start, "invalid number")
		}
		n.exp += e
		i = end
	}
	return n, i, nil
}

// skipDigits returns the offset past the run of ASCII digits at b[i:].
// Up to 16 digits are read with no data-dependent branch (two words at a
// time): on random data the branch ending a digit loop mispredicts, and
// float text has 7 to 9 digits. (The decoder keeps plain loops: there the
// value work overlaps the mispredictions, and the longer dependency chain
// through the offset cost more than it saved.)
func skipDigits(b []byte, i int) int {
	le := binary.LittleEndian
	for i+16 <= len(b) {
		k1 := digitCount(le.Uint64(b[i:]) ^ 0x3030303030303030)
		k2 := digitCount(le.Uint64(b[i+8:]) ^ 0x3030303030303030)
		k := k1 + k2*(k1>>3)
		i += k
		if k < 16 {
			return i
		}
	}
	for i+8 <= len(b) {
		k := digitCount(le.Uint64(b[i:]) ^ 0x3030303030303030)
		i += k
		if k < 8 {
			return i
		}
	}
	for i < len(b) && b[i]-'0' < 10 {
		i++
	}
	return i
}

// b2i is 1 for true: the compiler makes it a SETcc, not a branch.
func b2i(c bool) int {
	if c {
		return 1
	}
	return 0
}

// digitCount returns how many of the low bytes of x, a little-endian word
// of text XORed with '0' in each byte, were digits: bytes now 0..9.
func digitCount(x uint64) int {
	const lo7, add, hi = 0x7f7f7f7f7f7f7f7f, 0x7676767676767676, 0x8080808080808080
	// A byte's top bit ends up set when it is >= 10 (no carries: the
	// masked byte plus 0x76 stays below 0x100) or was >= 0x80.
	return bits.TrailingZeros64(((x&lo7)+add|x)&hi) >> 3
}

var pow10f32 = [...]float32{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}

// scanExponent reads the digits (with sign) after an 'e', clamped.
func scanExponent(b []byte, i int) (int, int, error) {
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	d0, e := i, 0
	for ; i < len(b) && b[i]-'0' < 10; i++ {
		if e < 1_000_000 { // clamp: larger exponents over/underflow anyway
			e = e*10 + int(b[i]-'0')
		}
	}
	if i == d0 {
		return 0, i, synErr(i, "invalid number")
	}
	if neg {
		e = -e
	}
	return e, i, nil
}

// scanNumberSlow is scanNumber for any number of digits, and the specials.
func scanNumberSlow(b []byte, i int) (number, int, error) {
	var n number
	start := i
	if i < len(b) && b[i] == '-' {
		n.neg = true
		i++
	}
	if i >= len(b) {
		return n, start, synErr(start, "invalid number")
	}
	nd := 0 // significant digits held in mant
	switch c := b[i]; {
	case c == '0':
		i++
	case c-'1' < 9:
		for ; i < len(b); i++ {
			d := b[i] - '0'
			if d >= 10 {
				break
			}
			if nd < 19 || fits(n.mant, d) {
				n.mant = n.mant*10 + uint64(d)
				nd++
			} else {
				n.exp++
				if d != 0 {
					n.trunc = true
				}
			}
		}
	case c == 'I':
		n.special = 'I'
		end, err := literal(b, i, "Infinity")
		return n, end, err
	case c == 'N' && !n.neg:
		n.special = 'N'
		end, err := literal(b, i, "NaN")
		return n, end, err
	default:
		return n, start, synErr(start, "invalid character "+quoteChar(c)+" where a value was expected")
	}
	if i < len(b) && b[i] == '.' {
		i++
		d0 := i
		for ; i < len(b); i++ {
			d := b[i] - '0'
			if d >= 10 {
				break
			}
			switch {
			case nd == 0 && d == 0: // a leading zero is not significant
				n.exp--
			case nd < 19 || fits(n.mant, d):
				n.mant = n.mant*10 + uint64(d)
				nd++
				n.exp--
			case d != 0:
				n.trunc = true
			}
		}
		if i == d0 {
			return n, start, synErr(start, "invalid number")
		}
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		e, end, err := scanExponent(b, i+1)
		if err != nil {
			return n, start, synErr(start, "invalid number")
		}
		n.exp += e
		i = end
	}
	return n, i, nil
}

// quotedFloat reads the strings "NaN", "Infinity" and "-Infinity" at b[i]:
// the protobuf JSON mapping's non-finite floats, which inferq writes in
// results (jsonenc.go) and Go's protojson and Python's json_format read and
// write. It is scanNumber's fallback for float elements, so it takes the
// failed scan's end and error and returns them when b[i] is no such string.
func quotedFloat(b []byte, i, end int, err error) (number, int, error) {
	var n number
	if i >= len(b) || b[i] != '"' {
		return n, end, err
	}
	s := b[i+1:]
	switch {
	case len(s) >= 4 && string(s[:4]) == `NaN"`:
		n.special = 'N'
		return n, i + 5, nil
	case len(s) >= 9 && string(s[:9]) == `Infinity"`:
		n.special = 'I'
		return n, i + 10, nil
	case len(s) >= 10 && string(s[:10]) == `-Infinity"`:
		n.special, n.neg = 'I', true
		return n, i + 11, nil
	}
	return n, end, err
}

// fits reports whether m*10+d fits in a uint64.
func fits(m uint64, d byte) bool {
	const cut = math.MaxUint64 / 10
	return m < cut || m == cut && uint64(d) <= math.MaxUint64%10
}

var pow10f64 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// bytesString views b as a string for strconv, which copies what it keeps.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// exact64 returns mant*10^exp correctly rounded when one IEEE operation on
// exact operands computes it (Clinger's fast path).
func (n number) exact64() (float64, bool) {
	if n.trunc || n.mant>>53 != 0 {
		return 0, false
	}
	f := float64(n.mant)
	switch {
	case n.mant == 0 || n.exp == 0:
	case n.exp > 0 && n.exp <= 22:
		f *= pow10f64[n.exp]
	case n.exp < 0 && n.exp >= -22:
		f /= pow10f64[-n.exp]
	default:
		return 0, false
	}
	if n.neg {
		f = -f
	}
	return f, true
}

// toFloat64 converts n (whose text is raw) to the nearest float64; ok is
// false when it overflows.
func (n number) toFloat64(raw []byte) (float64, bool) {
	switch n.special {
	case 'N':
		return math.NaN(), true
	case 'I':
		return math.Inf(sign(n.neg)), true
	}
	if f, ok := n.exact64(); ok {
		return f, true
	}
	if n.mant == 0 && !n.trunc {
		return math.Copysign(0, float64(sign(n.neg))), true
	}
	f, err := strconv.ParseFloat(bytesString(raw), 64)
	return f, err == nil
}

// toFloat32 converts n to the nearest float32 (rounding the decimal once,
// never through a float64 midpoint); ok is false when it overflows.
func (n number) toFloat32(raw []byte) (float32, bool) {
	switch n.special {
	case 'N':
		return float32(math.NaN()), true
	case 'I':
		return float32(math.Inf(sign(n.neg))), true
	}
	if !n.trunc && n.mant>>24 == 0 && n.exp >= -10 && n.exp <= 10 {
		f := float32(n.mant)
		if n.exp > 0 {
			f *= pow10f32[n.exp]
		} else if n.exp < 0 {
			f /= pow10f32[-n.exp]
		}
		if n.neg {
			f = -f
		}
		return f, true
	}
	if f, ok := n.exact64(); ok {
		// f is the decimal correctly rounded to float64. Rounding it again
		// to float32 gives the decimal's float32 rounding unless f landed
		// exactly on a float32 midpoint (or in the subnormal or overflow
		// range, where the midpoint test below does not hold).
		a := math.Abs(f)
		if a == 0 || a >= 0x1p-126 && a <= math.MaxFloat32 && math.Float64bits(f)&(1<<29-1) != 1<<28 {
			return float32(f), true
		}
	}
	if n.mant == 0 && !n.trunc {
		return float32(math.Copysign(0, float64(sign(n.neg)))), true
	}
	f, err := strconv.ParseFloat(bytesString(raw), 32)
	return float32(f), err == nil
}

func sign(neg bool) int {
	if neg {
		return -1
	}
	return 1
}

// intResult says why a number is not a usable integer.
type intResult uint8

const (
	intOK intResult = iota
	intNotInteger
	intOutOfRange
)

// integer returns |n| when n is integral (2.0 and 1e3 count) and fits in a
// uint64.
func (n number) integer() (uint64, intResult) {
	if n.special != 0 {
		return 0, intNotInteger
	}
	if n.trunc { // more than 20 significant digits
		if n.exp >= 0 {
			return 0, intOutOfRange
		}
		return 0, intNotInteger
	}
	m, e := n.mant, n.exp
	if m == 0 {
		return 0, intOK
	}
	for e < 0 && m%10 == 0 {
		m /= 10
		e++
	}
	if e < 0 {
		return 0, intNotInteger
	}
	for ; e > 0; e-- {
		if m > math.MaxUint64/10 {
			return 0, intOutOfRange
		}
		m *= 10
	}
	return m, intOK
}

// toInt64 converts an integral number to an int64.
func (n number) toInt64() (int64, error) {
	m, r := n.integer()
	switch {
	case r == intNotInteger:
		return 0, fmt.Errorf("not an integer")
	case r == intOutOfRange || !n.neg && m > math.MaxInt64 || n.neg && m > 1<<63:
		return 0, fmt.Errorf("out of range")
	}
	if n.neg {
		return -int64(m), nil
	}
	return int64(m), nil
}

// arrayDecoder decodes one JSON value, a scalar or arrays of arrays of
// scalars, into the raw little-endian bytes of one datatype.
type arrayDecoder struct {
	dt    tensor.DType
	label tensor.DType // the datatype errors name: dt, or FP16 read as FP32
	src   []byte       // the text being decoded
	out   []byte
	max   int64 // most elements allowed
	n     int64 // elements decoded
	rank  int   // -1 until the first scalar or empty array fixes it
	shape [maxRank]int64
	known [maxRank]bool
	count [maxRank]int64 // elements so far in the open array at each level
}

// decodeArray decodes the value at b[i:] as dtype dt and returns its bytes
// (capacity trimmed) and shape. capHint sizes the output buffer in bytes;
// max bounds the element count. Errors are plain text; the caller names the
// input.
func decodeArray(b []byte, i int, dt tensor.DType, capHint int, max int64) (data []byte, shape []int64, end int, err error) {
	if dt == tensor.FP16 {
		return nil, nil, i, errFP16JSON
	}
	if !dt.Valid() {
		return nil, nil, i, fmt.Errorf("datatype %s cannot be read from JSON", dt)
	}
	// Fields set one by one: as a literal the 600-byte struct was built
	// from a static copy, 55 instructions more a call (the mlp's task).
	var d arrayDecoder
	d.dt, d.label, d.src, d.max, d.rank = dt, dt, b, max, -1
	d.out = make([]byte, 0, capHint)
	end, err = d.decode(b, i)
	if err != nil {
		return nil, nil, end, err
	}
	shape = append([]int64(nil), d.shape[:d.rank]...)
	return d.out[:len(d.out):len(d.out)], shape, end, nil
}

// decodeHalfArray decodes the JSON array b as FP16 data: each number is
// read as a float32 and rounded to a half float; a finite number beyond
// the half range (65520 and up) is out of range, not an infinity. Only
// responses carry FP16 in JSON (inputs need the binary form). capHint is
// in float32 bytes.
func decodeHalfArray(b []byte, capHint int, max int64) ([]byte, []int64, error) {
	var d arrayDecoder
	d.dt, d.label, d.src, d.max, d.rank = tensor.FP32, tensor.FP16, b, max, -1
	d.out = make([]byte, 0, capHint)
	if _, err := d.decode(b, 0); err != nil {
		return nil, nil, err
	}
	half := make([]byte, len(d.out)/2)
	for k := range len(d.out) / 4 {
		f := float32frombytes(d.out[4*k:])
		h := tensor.Float32ToHalf(f)
		if h&0x7fff == 0x7c00 && !math.IsInf(float64(f), 0) {
			return nil, nil, fmt.Errorf("element %d: %g is out of range for FP16", k, f)
		}
		half[2*k], half[2*k+1] = byte(h), byte(h>>8)
	}
	return half, append([]int64(nil), d.shape[:d.rank]...), nil
}

var errFP16JSON = fmt.Errorf("FP16 data needs the binary form (content-type %s); JSON numbers carry no half floats", ContentTypeBinary)

func (d *arrayDecoder) decode(b []byte, i int) (int, error) {
	depth := 0
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return i, synErr(i, "unexpected end of input")
		}
		if b[i] == '[' {
			if depth >= maxRank {
				return i, fmt.Errorf("more than %d nested arrays", maxRank)
			}
			if d.rank >= 0 && depth >= d.rank {
				return i, fmt.Errorf("ragged nested array: an array at depth %d, where the elements before it had numbers", depth)
			}
			d.count[depth] = 0
			depth++
			i = skipWS(b, i+1)
			if i >= len(b) || b[i] != ']' {
				continue // read the first element
			}
			i++
			if d.rank < 0 {
				d.rank = depth
			}
			if err := d.close(depth - 1); err != nil {
				return i, err
			}
			depth--
		} else {
			if d.rank < 0 {
				d.rank = depth
			} else if depth != d.rank {
				return i, fmt.Errorf("ragged nested array: a scalar at depth %d, where the elements before it had depth %d", depth, d.rank)
			}
			d.n++
			if d.n > d.max {
				return i, errTooManyElements(d.max)
			}
			var err error
			if i, err = d.scalar(b, i); err != nil {
				return i, err
			}
			if depth > 0 {
				d.count[depth-1]++
			}
		}
		// After a value: a comma starts the next element; brackets close
		// arrays, each of which completes an element of its parent.
		for {
			if depth == 0 {
				return i, nil
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return i, synErr(i, "unterminated array")
			}
			if b[i] == ',' {
				i++
				break
			}
			if b[i] != ']' {
				return i, synErr(i, "expected ',' or ']' in array")
			}
			i++
			if err := d.close(depth - 1); err != nil {
				return i, err
			}
			depth--
		}
	}
}

// close ends the open array at level, checking its length against the
// other arrays at that level, and counts it in its parent.
func (d *arrayDecoder) close(level int) error {
	c := d.count[level]
	if !d.known[level] {
		d.known[level], d.shape[level] = true, c
	} else if d.shape[level] != c {
		return fmt.Errorf("ragged nested array: dim %d has %d elements here and %d before", level, c, d.shape[level])
	}
	if level > 0 {
		d.count[level-1]++
	}
	return nil
}

func errTooManyElements(max int64) error {
	return fmt.Errorf("%w: more than %d elements", ErrTooLarge, max)
}

// scalar decodes one element at b[i] and appends its bytes.
func (d *arrayDecoder) scalar(b []byte, i int) (int, error) {
	switch d.dt {
	case tensor.FP32:
		n, end, err := scanNumber(b, i)
		if err != nil {
			return d.quotedElem(i, end, err)
		}
		f, ok := n.toFloat32(b[i:end])
		if !ok {
			return end, d.rangeErr(b[i:end])
		}
		d.out = binary.LittleEndian.AppendUint32(d.out, math.Float32bits(f))
		return end, nil
	case tensor.FP64:
		n, end, err := scanNumber(b, i)
		if err != nil {
			return d.quotedElem(i, end, err)
		}
		f, ok := n.toFloat64(b[i:end])
		if !ok {
			return end, d.rangeErr(b[i:end])
		}
		d.out = binary.LittleEndian.AppendUint64(d.out, math.Float64bits(f))
		return end, nil
	case tensor.BOOL:
		v, end, err := parseBool(b, i)
		if err != nil {
			return end, d.elemErr(fmt.Errorf("BOOL elements are true or false"))
		}
		var x byte
		if v {
			x = 1
		}
		d.out = append(d.out, x)
		return end, nil
	case tensor.BYTES:
		raw, end, esc, err := scanString(b, i)
		if err != nil {
			if i < len(b) && b[i] != '"' {
				err = fmt.Errorf("BYTES elements are JSON strings")
			}
			return end, d.elemErr(err)
		}
		at := len(d.out)
		d.out = append(d.out, 0, 0, 0, 0)
		if esc {
			d.out = unescape(d.out, raw)
		} else {
			d.out = append(d.out, raw...)
		}
		binary.LittleEndian.PutUint32(d.out[at:], uint32(len(d.out)-at-4))
		return end, nil
	}
	// Integer datatypes.
	n, end, err := scanNumber(b, i)
	if err != nil {
		return end, d.elemErr(err)
	}
	m, r := n.integer()
	if r == intNotInteger {
		return end, d.elemErr(fmt.Errorf("%s is not an integer (%s)", clip(b[i:end]), d.dt))
	}
	bits := uint(d.dt.Size() * 8)
	switch d.dt {
	case tensor.UINT8, tensor.UINT16, tensor.UINT32, tensor.UINT64:
		if r != intOK || n.neg && m != 0 || bits < 64 && m >= 1<<bits {
			return end, d.rangeErr(b[i:end])
		}
	default:
		lim := uint64(1) << (bits - 1) // |min|; max is lim-1
		if r != intOK || !n.neg && m >= lim || n.neg && m > lim {
			return end, d.rangeErr(b[i:end])
		}
		if n.neg {
			m = -m // two's complement, truncated below
		}
	}
	switch bits {
	case 8:
		d.out = append(d.out, byte(m))
	case 16:
		d.out = binary.LittleEndian.AppendUint16(d.out, uint16(m))
	case 32:
		d.out = binary.LittleEndian.AppendUint32(d.out, uint32(m))
	default:
		d.out = binary.LittleEndian.AppendUint64(d.out, m)
	}
	return end, nil
}

// quotedElem appends the float element at d.src[i] that scanNumber refused
// (with end and err) when it is a quoted non-finite value (quotedFloat).
// It takes the text from d, not an argument: keeping the slice live across
// scalar's call to scanNumber for this cold path cost 3 instructions an
// element on the hot one.
func (d *arrayDecoder) quotedElem(i, end int, err error) (int, error) {
	n, end, err := quotedFloat(d.src, i, end, err)
	if err != nil {
		return end, d.elemErr(err)
	}
	f, _ := n.toFloat64(nil) // a special: no text needed
	if d.dt == tensor.FP32 {
		d.out = binary.LittleEndian.AppendUint32(d.out, math.Float32bits(float32(f)))
	} else {
		d.out = binary.LittleEndian.AppendUint64(d.out, math.Float64bits(f))
	}
	return end, nil
}

func (d *arrayDecoder) elemErr(err error) error {
	return fmt.Errorf("element %d: %w", d.n-1, err)
}

func (d *arrayDecoder) rangeErr(raw []byte) error {
	return fmt.Errorf("element %d: %s is out of range for %s", d.n-1, clip(raw), d.label)
}

// clip shortens a number's text for an error message.
func clip(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:37]) + "..."
	}
	return string(raw)
}
