package ddbwire

import (
	"bufio"
	"bytes"
	"hash/crc32"
)

// A success read as it came (issue 37): http.ReadResponse builds a
// Response, a Header map and a string for every header of every answer,
// about 14 allocations and 3% of ledgerd's CPU a purchase, for answers
// ledgerd reads three things of: that it is a 200, its X-Amz-Crc32 and
// whether it says Connection: close. quickAnswer reads those from the
// reader's buffer without consuming it, when the answer is of the simple
// form DynamoDB's successes have and came whole; anything else (another
// status, HTTP/1.0, chunked, no Content-Length, a header twice, a folded
// line, a head or body not yet in the buffer) is left to
// http.ReadResponse, as is a success that accepter does not take (a
// checksum that does not match, a body the reader cannot read), so that
// the SDK's deserialiser reads it as before.

// quick is a 200's answer read from the buffer: size is the bytes of its
// head and body.
type quick struct {
	size  int
	close bool   // Connection: close
	crc   []byte // X-Amz-Crc32's value; nil: none
	body  []byte // in the reader's buffer: valid until it is read on
}

// quickAnswer is the answer at the start of br's buffer, if it is a 200 of
// the simple form, whole in the buffer.
func quickAnswer(br *bufio.Reader) (quick, bool) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return quick{}, false
	}
	head := buf[:end+2] // each line with its CRLF
	line, head, _ := bytes.Cut(head, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200")) || (len(line) > 12 && line[12] != ' ') {
		return quick{}, false
	}
	var q quick
	length := -1
	for len(head) > 0 {
		line, head, _ = bytes.Cut(head, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !token(name) || !fieldValue(value) {
			return quick{}, false // a folded line, or not a header as textproto reads one
		}
		value = bytes.TrimLeft(value, " \t") // as textproto keeps it
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := digits(bytes.TrimRight(value, " \t"))
			if !ok || length >= 0 {
				return quick{}, false
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return quick{}, false
		case bytes.EqualFold(name, []byte("Connection")):
			for token := range bytes.SplitSeq(value, []byte(",")) {
				if bytes.EqualFold(bytes.Trim(token, " \t"), []byte("close")) {
					q.close = true
				}
			}
		case bytes.EqualFold(name, []byte("X-Amz-Crc32")):
			if q.crc != nil {
				return quick{}, false
			}
			q.crc = value
		}
	}
	start := end + 4
	if length < 0 || len(buf)-start < length {
		return quick{}, false
	}
	q.size = start + length
	q.body = buf[start:q.size]
	return q, true
}

// token says whether s is a header's name: one or more of RFC 9110's
// token characters.
func token(s []byte) bool {
	for _, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return len(s) > 0
}

// fieldValue says whether s is a header's value as textproto takes one:
// no control character but a tab.
func fieldValue(s []byte) bool {
	for _, c := range s {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// digits is s's value when s is decimal digits that fit an int (a
// Content-Length as http.ReadResponse takes one).
func digits(s []byte) (int, bool) {
	if len(s) == 0 || len(s) > 15 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// accepter takes a success read as it came, as answered takes one read by
// http.ReadResponse: its checksum matches (when the client checks it) and
// read, if any, reads its body.
type accepter struct {
	checkCRC bool
	read     func(body []byte) bool
}

func (a accepter) accepts(q quick) bool {
	if a.checkCRC && len(q.crc) > 0 {
		want, ok := digits(q.crc)
		if !ok || want > 1<<32-1 || uint32(want) != crc32.ChecksumIEEE(q.body) {
			return false
		}
	}
	return a.read == nil || a.read(q.body)
}
