package receive

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server is a Receiver listening on a loopback port of its own, for a
// WebhookService endpoint's URL.
type Server struct {
	*Receiver
	// URL is where it listens: http://127.0.0.1:<port>/webhooks.
	URL string

	srv    *http.Server
	served chan error
}

// Start listens on a free port of 127.0.0.1 and serves a Receiver made
// with opts until Close.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := New(opts)
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks", r)
	s := &Server{Receiver: r, URL: "http://" + ln.Addr().String() + "/webhooks",
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, served: make(chan error, 1)}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops listening and waits for the deliveries in progress, up to
// ctx.
func (s *Server) Close(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	if err := <-s.served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	return nil
}
