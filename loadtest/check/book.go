package check

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/pointledger/pointledger/loadtest/drive"
)

// Book remembers every mutation sent to ledgerd and what came back, to
// check afterwards that each acknowledged request was applied exactly once
// and each unacknowledged one at most once.
type Book struct {
	mu     sync.Mutex
	sent   map[string]*sentRequest // by request id
	probes []string                // probes answered otherwise than expected
}

type sentRequest struct {
	op      drive.Op
	acks    int
	entries map[string]bool // entry ids the acknowledgements named
	codes   map[string]int
}

// NewBook is a book of nothing sent yet.
func NewBook() *Book { return &Book{sent: map[string]*sentRequest{}} }

// Sending notes a mutation about to be sent (a probe is not a request of
// its own).
func (b *Book) Sending(o drive.Op) {
	if b == nil || !o.Mutates() || o.Expect != "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sent[o.RequestID]; !ok {
		b.sent[o.RequestID] = &sentRequest{op: o, entries: map[string]bool{}, codes: map[string]int{}}
	}
}

// Answered notes what a mutation was answered.
func (b *Book) Answered(o drive.Op, out drive.Outcome) {
	if b == nil || !o.Mutates() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sent[o.RequestID]
	if o.Expect != "" {
		switch {
		case out.Code == o.Expect, transient[out.Code]: // transient: the ledger was busy, not an answer about the id
			return
		case out.Code == "ok" && s != nil && s.acks == 0:
			// The request it re-uses was never acknowledged (it failed, or
			// is still in flight): the probe may be the one applied, and is
			// the request the ledger must now hold exactly once.
			s.op, s.op.Expect = o, ""
		default:
			b.probes = append(b.probes, fmt.Sprintf("request %s re-sent with amount %s: answered %s, want %s", o.RequestID, o.Amount, out.Code, o.Expect))
			return
		}
	}
	s.codes[out.Code]++
	if out.Code == "ok" {
		s.acks++
		s.entries[out.EntryID] = true
	}
}

// Users are the users the book sent requests for.
func (b *Book) Users() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range b.sent {
		seen[s.op.User] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// transient are the codes a busy ledger may answer any request with.
var transient = map[string]bool{"aborted": true, "unavailable": true, "deadline_exceeded": true, "canceled": true, "resource_exhausted": true}
