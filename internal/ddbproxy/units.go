package ddbproxy

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// The sizes and units below follow DynamoDB's developer guide, "Item sizes
// and formats" and "Read and write operations":
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
const (
	writeUnitBytes = 1024 // a write unit writes up to 1 KB of an item
	readUnitBytes  = 4096 // a read unit reads up to 4 KB, strongly consistent
)

// item is an item in DynamoDB's JSON wire format: attribute name -> value
// such as {"S":"x"}.
type item map[string]json.RawMessage

// itemSize is the size DynamoDB charges for an item: the UTF-8 length of
// each attribute name plus the size of its value.
func itemSize(it item) (int, error) {
	n := 0
	for name, raw := range it {
		v, err := valueSize(raw)
		if err != nil {
			return 0, fmt.Errorf("attribute %q: %w", name, err)
		}
		n += len(name) + v
	}
	return n, nil
}

// valueSize is the size of one attribute value: a string its UTF-8 bytes,
// a number about 1 byte per two significant digits plus 1, a binary its
// bytes, a boolean or null 1, a list or map 3 bytes plus 1 byte and the size
// of each element (and, in a map, its name), a set the sum of its elements.
func valueSize(raw json.RawMessage) (int, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("value: %w", err)
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("value with %d types", len(v))
	}
	for typ, x := range v {
		switch typ {
		case "S":
			var s string
			err := json.Unmarshal(x, &s)
			return len(s), err
		case "N":
			var s string
			err := json.Unmarshal(x, &s)
			return numberSize(s), err
		case "B":
			b, err := binary(x)
			return len(b), err
		case "BOOL", "NULL":
			return 1, nil
		case "SS":
			var ss []string
			err := json.Unmarshal(x, &ss)
			n := 0
			for _, s := range ss {
				n += len(s)
			}
			return n, err
		case "NS":
			var ns []string
			err := json.Unmarshal(x, &ns)
			n := 0
			for _, s := range ns {
				n += numberSize(s)
			}
			return n, err
		case "BS":
			var bs []json.RawMessage
			if err := json.Unmarshal(x, &bs); err != nil {
				return 0, err
			}
			n := 0
			for _, e := range bs {
				b, err := binary(e)
				if err != nil {
					return 0, err
				}
				n += len(b)
			}
			return n, nil
		case "L":
			var l []json.RawMessage
			if err := json.Unmarshal(x, &l); err != nil {
				return 0, err
			}
			n := 3
			for _, e := range l {
				s, err := valueSize(e)
				if err != nil {
					return 0, err
				}
				n += 1 + s
			}
			return n, nil
		case "M":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(x, &m); err != nil {
				return 0, err
			}
			n := 3
			for name, e := range m {
				s, err := valueSize(e)
				if err != nil {
					return 0, err
				}
				n += 1 + len(name) + s
			}
			return n, nil
		default:
			return 0, fmt.Errorf("unknown type %q", typ)
		}
	}
	panic("unreachable")
}

func binary(x json.RawMessage) ([]byte, error) {
	var s string
	if err := json.Unmarshal(x, &s); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(s)
}

// numberSize is about 1 byte per two significant digits plus 1 byte:
// leading and trailing zeros do not count, nor do the sign, the point or
// an exponent.
func numberSize(s string) int {
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	digits := strings.Trim(strings.NewReplacer("-", "", "+", "", ".", "").Replace(mantissa), "0")
	if digits == "" {
		digits = "0"
	}
	return (len(digits)+1)/2 + 1
}

// writeUnits is what writing an item of size bytes costs: 1 unit per
// started KB, at least 1.
func writeUnits(size int) float64 { return units(size, writeUnitBytes) }

// readUnits is what a strongly consistent read of size bytes costs: 1 unit
// per started 4 KB, at least 1.
func readUnits(size int) float64 { return units(size, readUnitBytes) }

func units(size, per int) float64 {
	return math.Max(1, math.Ceil(float64(size)/float64(per)))
}
