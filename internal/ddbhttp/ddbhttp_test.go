package ddbhttp

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// sdkBody stands for the SDK's request body: a reader net/http does not
// know to be in memory.
type sdkBody struct{ r io.Reader }

func (b *sdkBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *sdkBody) Close() error               { return nil }

// TestOneWrite sends requests as the SDK does, with and without OneWrite,
// and counts the writes on the connection and what the server received.
func TestOneWrite(t *testing.T) {
	t.Parallel()
	received := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		received <- b
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	small := strings.Repeat("x", 1500)
	large := strings.Repeat("y", MaxBufferedBody+1)
	tests := []struct {
		name       string
		oneWrite   bool
		body       string
		length     int64 // -1: unknown
		wantWrites int64
	}{
		{name: "a small body, as the SDK sends it: two writes", body: small, length: int64(len(small)), wantWrites: 2},
		{name: "a small body through OneWrite: one write", oneWrite: true, body: small, length: int64(len(small)), wantWrites: 1},
		{name: "a body past MaxBufferedBody goes as it came", oneWrite: true, body: large, length: int64(len(large)), wantWrites: -1},
		{name: "a body of unknown length goes as it came", oneWrite: true, body: small, length: -1, wantWrites: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var writes atomic.Int64
			transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				return countingConn{Conn: c, writes: &writes}, err
			}}
			t.Cleanup(transport.CloseIdleConnections)
			var client Doer = &http.Client{Transport: transport}
			if tt.oneWrite {
				client = OneWrite(client)
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL, &sdkBody{r: strings.NewReader(tt.body)})
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tt.length
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if got := <-received; !bytes.Equal(got, []byte(tt.body)) {
				t.Errorf("server received %d bytes, want the %d sent", len(got), len(tt.body))
			}
			if got := writes.Load(); tt.wantWrites > 0 && got != tt.wantWrites {
				t.Errorf("%d writes for the request, want %d", got, tt.wantWrites)
			}
		})
	}
}

// TestOneWriteOnce: wrapping twice reads the body once.
func TestOneWriteOnce(t *testing.T) {
	t.Parallel()
	c := &http.Client{}
	if w := OneWrite(OneWrite(c)); w.(oneWrite).next != c {
		t.Errorf("OneWrite(OneWrite(c)) wraps %T, want c itself", w.(oneWrite).next)
	}
}
