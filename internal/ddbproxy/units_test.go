package ddbproxy

import (
	"encoding/json"
	"testing"
	"time"
)

// Sizes by the rules of DynamoDB's "Item sizes and formats": names and
// strings their UTF-8 bytes, numbers 1 byte per two significant digits
// plus 1, binaries their bytes, booleans and nulls 1, lists and maps 3 plus
// 1 per element, sets the sum of their elements.
func TestItemSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		item string
		want int
	}{
		{`{"a":{"S":"xyz"}}`, 1 + 3},
		{`{"né":{"S":"café"}}`, 3 + 5}, // UTF-8 bytes, not characters
		{`{"n":{"N":"12345"}}`, 1 + 3 + 1},
		{`{"n":{"N":"-0012.3400"}}`, 1 + 2 + 1}, // 1234: zeros, sign and point do not count
		{`{"n":{"N":"0"}}`, 1 + 1 + 1},
		{`{"b":{"B":"AAECAw=="}}`, 1 + 4}, // 4 bytes, base64 on the wire
		{`{"t":{"BOOL":true},"z":{"NULL":true}}`, 1 + 1 + 1 + 1},
		{`{"l":{"L":[]}}`, 1 + 3},
		{`{"l":{"L":[{"S":"ab"},{"N":"1"}]}}`, 1 + 3 + (1 + 2) + (1 + 2)},
		{`{"m":{"M":{"k":{"S":"ab"}}}}`, 1 + 3 + (1 + 1 + 2)},
		{`{"s":{"SS":["a","bc"]},"ns":{"NS":["1","100"]}}`, 1 + 3 + 2 + (2 + 2)},
	} {
		var it item
		if err := json.Unmarshal([]byte(tc.item), &it); err != nil {
			t.Fatal(err)
		}
		got, err := itemSize(it)
		if err != nil {
			t.Fatalf("%s: %v", tc.item, err)
		}
		if got != tc.want {
			t.Errorf("size of %s = %d, want %d", tc.item, got, tc.want)
		}
	}
}

func TestUnitsRoundUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size        int
		write, read float64
	}{
		{0, 1, 1}, {1, 1, 1}, {1024, 1, 1}, {1025, 2, 1}, {4096, 4, 1}, {4097, 5, 2}, {8192, 8, 2},
	} {
		if w, r := writeUnits(tc.size), readUnits(tc.size); w != tc.write || r != tc.read {
			t.Errorf("%d bytes: %v write and %v read units, want %v and %v", tc.size, w, r, tc.write, tc.read)
		}
	}
}

// A bucket fills at its rate up to one second's worth, and a request larger
// than that passes only from a full bucket, leaving it in debt.
func TestBucket(t *testing.T) {
	t.Parallel()
	var b bucket
	at := func(s float64) { b.fill(time0.Add(secs(s)), 10) }
	at(0)
	if b.units != 10 || !b.has(10, 10) {
		t.Fatalf("a new bucket holds %v units, want 10", b.units)
	}
	b.units -= 25 // a request of 25 units from the full bucket
	at(1)
	if b.has(1, 10) {
		t.Errorf("a second after going 15 units into debt at 10 a second: %v units, want less than 1", b.units)
	}
	at(2.5)
	if b.units != 10 {
		t.Errorf("2.5 s after: %v units, want 10 (a second's worth at most)", b.units)
	}
}

var time0 = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
