package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes. In YAML it is a plain integer or a string
// with a binary unit; see ParseByteSize.
type ByteSize int64

// Binary units.
const (
	KiB ByteSize = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var errSizeSyntax = errors.New(`want bytes as an integer, or a number with a unit: KiB, MiB, GiB, TiB (also Ki/Mi/Gi/Ti and k/m/g/t as in "1g"), e.g. "256MiB"`)

// ParseByteSize parses "1048576", "256MiB", "1.5GiB", "512Ki" or "1g".
// Every unit is binary (powers of 1024): k/m/g/t mean KiB/MiB/GiB/TiB as
// in Docker and the Responses API's container memory_limit ("1g", "4g").
// Decimal SI units (KB, MB, GB) are rejected as ambiguous.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, errSizeSyntax
	}
	var mult ByteSize
	switch strings.ToLower(unit) {
	case "", "b":
		mult = 1
	case "k", "ki", "kib":
		mult = KiB
	case "m", "mi", "mib":
		mult = MiB
	case "g", "gi", "gib":
		mult = GiB
	case "t", "ti", "tib":
		mult = TiB
	case "kb", "mb", "gb", "tb":
		return 0, fmt.Errorf("unit %q is ambiguous (1000 or 1024?): write %siB for binary units or a plain byte count", unit, strings.ToUpper(unit[:1]))
	default:
		return 0, fmt.Errorf("unknown unit %q: %w", unit, errSizeSyntax)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || (n > 0 && n > math.MaxInt64/int64(mult)) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return ByteSize(n) * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, errSizeSyntax
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return ByteSize(v), nil
}

// String formats with the largest binary unit that divides exactly.
func (b ByteSize) String() string {
	for _, u := range []struct {
		n    ByteSize
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b != 0 && b%u.n == 0 {
			return strconv.FormatInt(int64(b/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
