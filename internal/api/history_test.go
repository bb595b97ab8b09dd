package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
)

// historyOf lists user's history with min_version, newest first.
func (s *testServer) historyOf(ctx context.Context, user string, minVersion int64) (*pb.ListHistoryResponse, error) {
	res, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: user, MinVersion: minVersion}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// laggingHistory is a server whose history trails the ledger (paused, as
// a projector that lags) after alice's grant (version 1) and purchase
// (version 2), the purchase not yet in it.
func laggingHistory(t *testing.T, wait time.Duration) (*testServer, *pb.PurchaseResponse) {
	t.Helper()
	s := newServerWith(t, servetest.Options{HistoryWait: wait})
	s.grant(t, "alice", "g", "10")
	s.srv.History.Pause()
	p, err := s.purchase("alice", "p", "4")
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// A history behind the version asked for is waited for, and the answer
// has the purchase that version is; without min_version, the history is
// read as it is.
func TestListHistoryWaitsForMinVersion(t *testing.T) {
	t.Parallel()
	s, p := laggingHistory(t, 30*time.Second) // a bound on a hang, not on speed
	ctx := context.Background()
	now, err := s.historyOf(ctx, "alice", 0)
	if err != nil || len(now.Items) != 1 {
		t.Fatalf("history without min_version: %v, %v; want the grant only, as the history lags", now, err)
	}

	type answer struct {
		res *pb.ListHistoryResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := s.historyOf(ctx, "alice", p.Entry.Version)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("ListHistory with min_version %d answered before the history had it: %v, %v", p.Entry.Version, a.res, a.err)
	case <-time.After(100 * time.Millisecond):
	}
	s.srv.History.Resume()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.res.Items) != 2 || a.res.Items[0].RequestId != "p" || a.res.Items[0].Version != p.Entry.Version {
		t.Errorf("history with min_version %d = %v, want the purchase first", p.Entry.Version, a.res.Items)
	}
	// Reached already: at once.
	for _, v := range []int64{1, 2} {
		if res, err := s.historyOf(ctx, "alice", v); err != nil || len(res.Items) != 2 {
			t.Errorf("history with min_version %d, reached: %v, %v", v, res, err)
		}
	}
}

// A history that does not reach the version within the wait is
// unavailable, HISTORY_BEHIND, saying where it is; a version the ledger
// does not have is refused at once; a negative one is invalid.
func TestListHistoryMinVersionRefusals(t *testing.T) {
	t.Parallel()
	const wait = 300 * time.Millisecond
	s, p := laggingHistory(t, wait)
	ctx := context.Background()

	start := time.Now()
	_, err := s.historyOf(ctx, "alice", p.Entry.Version)
	took := time.Since(start)
	if code, why := reason(err); code != connect.CodeUnavailable || why != ledger.ReasonHistoryBehind {
		t.Fatalf("history behind: %v, want unavailable/%s", err, ledger.ReasonHistoryBehind)
	}
	if msg := err.Error(); !strings.Contains(msg, "reached version 1, not min_version 2") {
		t.Errorf("message %q does not say the version reached and the one asked", msg)
	}
	if took < wait {
		t.Errorf("answered HISTORY_BEHIND after %v, before the wait (%v) was over", took, wait)
	}

	// A deadline nearer than the wait: the answer still says why, before
	// the deadline passes (at ¾ of it). The deadline is seconds, not a
	// fraction of one: the last quarter is the answer's time to arrive, and
	// on a busy machine 125 ms was not enough (deadline_exceeded instead).
	const long = 30 * time.Second // "at once" below: well before it
	s, p = laggingHistory(t, long)
	dctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	_, err = s.historyOf(dctx, "alice", p.Entry.Version)
	if code, why := reason(err); code != connect.CodeUnavailable || why != ledger.ReasonHistoryBehind {
		t.Errorf("history behind, with a deadline nearer than the wait: %v, want unavailable/%s", err, ledger.ReasonHistoryBehind)
	}

	for _, c := range []struct {
		name    string
		user    string
		version int64
		code    connect.Code
		reason  string
	}{
		{"past the ledger", "alice", p.Entry.Version + 1, connect.CodeFailedPrecondition, ledger.ReasonMinVersionAhead},
		{"a user with no entries", "nobody", 1, connect.CodeFailedPrecondition, ledger.ReasonMinVersionAhead},
		{"negative", "alice", -1, connect.CodeInvalidArgument, ledger.ReasonInvalidMinVersion},
	} {
		start := time.Now()
		_, err := s.historyOf(ctx, c.user, c.version)
		if code, why := reason(err); code != c.code || why != c.reason {
			t.Errorf("%s: %v, want %v/%s", c.name, err, c.code, c.reason)
		}
		if took := time.Since(start); took >= long/2 {
			t.Errorf("%s: answered after %v, want at once, not after the wait", c.name, took)
		}
	}
	// A malformed query is refused before the wait too.
	start = time.Now()
	_, err = s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: "alice", MinVersion: p.Entry.Version, PageSize: -1}))
	if code, why := reason(err); code != connect.CodeInvalidArgument || why != ledger.ReasonInvalidPageSize || time.Since(start) >= long/2 {
		t.Errorf("page_size -1 with min_version: %v after %v, want invalid_argument/%s at once", err, time.Since(start), ledger.ReasonInvalidPageSize)
	}
}
