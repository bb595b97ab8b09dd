package ddbwire

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"
)

// quickAnswer reads what http.ReadResponse reads of a 200 of the simple
// form (its status, Connection: close, X-Amz-Crc32, its body and where
// it ends), and leaves every other answer to it.
func TestQuickAnswerAsReadResponse(t *testing.T) {
	t.Parallel()
	crc := fmt.Sprint(crc32.ChecksumIEEE([]byte("{}")))
	for _, tt := range []struct {
		name, raw string
		quick     bool
	}{
		{"DynamoDB's success", "HTTP/1.1 200 OK\r\nServer: Server\r\nx-amzn-RequestId: R1\r\nx-amz-crc32: " + crc + "\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\nDate: Sat, 28 Nov 2026 07:00:00 GMT\r\n\r\n{}", true},
		{"no reason phrase", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}", true},
		{"an empty body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", true},
		{"close among tokens", "HTTP/1.1 200 OK\r\nconnection: keep-alive , CLOSE\r\ncontent-length:2\r\n\r\n{}", true},
		{"keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}", true},
		{"the next answer buffered behind", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n", true},
		{"a value's spaces", "HTTP/1.1 200 OK\r\nContent-Length:  2 \r\nX-Amz-Crc32:\t" + crc + "\r\n\r\n{}", true},
		{"an empty checksum", "HTTP/1.1 200 OK\r\nX-Amz-Crc32: \r\nContent-Length: 2\r\n\r\n{}", true},

		{"another status", "HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}", false},
		{"201", "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a status of four digits", "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false},
		{"no Content-Length", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{}", false},
		{"Content-Length twice", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a signed Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}", false},
		{"X-Amz-Crc32 twice", "HTTP/1.1 200 OK\r\nX-Amz-Crc32: 1\r\nX-Amz-Crc32: 2\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a folded line", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a space in a name", "HTTP/1.1 200 OK\r\nX A: a\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a control byte in a value", "HTTP/1.1 200 OK\r\nX-A: a\x01\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a line without a colon", "HTTP/1.1 200 OK\r\nX-A\r\nContent-Length: 2\r\n\r\n{}", false},
		{"the head cut short", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", false},
		{"the body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{}", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.raw), 4096)
			if _, err := br.Peek(1); err != nil {
				t.Fatal(err)
			}
			q, ok := quickAnswer(br)
			if ok != tt.quick {
				t.Fatalf("quick %v, want %v", ok, tt.quick)
			}
			if br.Buffered() != len(tt.raw) {
				t.Fatalf("%d bytes left buffered, want all %d: quickAnswer reads none", br.Buffered(), len(tt.raw))
			}
			if !ok {
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || resp.Close != q.close || !bytes.Equal(body, q.body) ||
				resp.Header.Get("X-Amz-Crc32") != string(q.crc) || len(tt.raw)-br.Buffered() != q.size {
				t.Errorf("quick: close %v, crc %q, body %q, %d bytes; ReadResponse: %d, close %v, crc %q, body %q, %d bytes",
					q.close, q.crc, q.body, q.size, resp.StatusCode, resp.Close, resp.Header.Get("X-Amz-Crc32"), body, len(tt.raw)-br.Buffered())
			}
		})
	}
}

// A success read as it came is taken as answered takes one: its checksum
// matches when the client checks it, and the reader reads its body.
func TestAccepterAsAnswered(t *testing.T) {
	t.Parallel()
	body := []byte(`{"Item":{}}`)
	crc := []byte(fmt.Sprint(crc32.ChecksumIEEE(body)))
	readable := func([]byte) bool { return true }
	unreadable := func([]byte) bool { return false }
	for _, tt := range []struct {
		name string
		a    accepter
		crc  []byte
		want bool
	}{
		{"matches", accepter{checkCRC: true}, crc, true},
		{"no checksum", accepter{checkCRC: true}, nil, true},
		{"does not match", accepter{checkCRC: true}, []byte("12345"), false},
		{"past 32 bits", accepter{checkCRC: true}, []byte("4294967296"), false},
		{"not a number", accepter{checkCRC: true}, []byte("x"), false},
		{"not checked", accepter{}, []byte("12345"), true},
		{"read", accepter{checkCRC: true, read: readable}, crc, true},
		{"not readable", accepter{checkCRC: true, read: unreadable}, crc, false},
	} {
		c := &Client{checkCRC: tt.a.checkCRC}
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
		if tt.crc != nil {
			resp.Header.Set("X-Amz-Crc32", string(tt.crc))
		}
		answeredOK := c.checksumMatches(resp, body) && (tt.a.read == nil || tt.a.read(body))
		if got := tt.a.accepts(quick{crc: tt.crc, body: body}); got != tt.want || got != answeredOK {
			t.Errorf("%s: accepts %v, want %v (answered %v)", tt.name, got, tt.want, answeredOK)
		}
	}
}
