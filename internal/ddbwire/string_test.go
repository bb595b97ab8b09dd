package ddbwire

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// appendStringByteByByte is appendString as it was before it skipped eight
// plain bytes at a time: what it must still write, byte for byte.
func appendStringByteByByte(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
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
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendString writes what it wrote a byte at a time: each byte that needs
// a look at every place in a word, and random strings of every length.
func TestAppendStringAsByteByByte(t *testing.T) {
	t.Parallel()
	special := []string{"\"", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x20", "\x7f", "\x80", "\xff", "é", "€", "😀", "\u2028", "!", "#", "[", "]", "~"}
	var cases []string
	for _, sp := range special {
		for at := range 17 {
			cases = append(cases, strings.Repeat("a", at)+sp+strings.Repeat("b", 16-at))
		}
	}
	r := rand.New(rand.NewPCG(37, 1))
	alphabet := []byte("abcXYZ019#:-_ .\"\\\n\t\x00\x01\x1f\x7f\x80\xc3\xa9\xe2\x82\xac\xff")
	for range 5000 {
		n := r.IntN(40)
		b := make([]byte, n)
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = byte('a' + r.IntN(26))
			}
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := appendString([]byte("x"), s), appendStringByteByByte([]byte("x"), s); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %q, want %q", s, got, want)
		}
	}
}

// A purchase's strings: names, ids, times, expressions.
var purchaseStrings = []string{"PK", "ACCT#bench-user-123", "SK", "E#00000000000000000042", "entry_id", "01JDX3K5N8Q2W7E4R6T9Y1U3I5", "create_time", "2026-11-28T08:00:00.000000Z",
	"version = :expected AND balance = :before AND #status = :status AND balance >= :need", "SET balance = :balance, version = :version, update_time = :now", "t1_ledger"}

func BenchmarkAppendString(b *testing.B) {
	for _, f := range []struct {
		name string
		f    func([]byte, string) []byte
	}{{"words", appendString}, {"bytes", appendStringByteByByte}} {
		b.Run(f.name, func(b *testing.B) {
			buf := make([]byte, 0, 1024)
			for b.Loop() {
				buf = buf[:0]
				for _, s := range purchaseStrings {
					buf = f.f(buf, s)
				}
			}
		})
	}
}
