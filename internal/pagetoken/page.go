package pagetoken

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/pointledger/pointledger/internal/ledger"
)

// The paged reads themselves, whatever store or history they read: checking
// the request, decoding the token to a position, reading one item more than
// a page to learn whether another follows, and the next page's token. A
// store supplies only the read of a window of versions, so every store pages
// alike and refuses the same tokens.

// Scope names of the reads, first in every token's scope: a token of one
// read is refused by another.
const (
	EntriesRead = "ListEntries"
	HistoryRead = "ListHistory"
	HoldsRead   = "ListHolds"
)

// Window is the versions one page reads, in the order of the list.
type Window struct {
	OldestFirst bool
	After       int64 // oldest first: versions above After
	Before      int64 // newest first: versions below Before; 0: from the newest
	Limit       int   // at most this many items
}

// EntriesAfter reads a user's entries, as ledger.Store does.
type EntriesAfter func(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error)

// Entries is ListEntries: up to pageSize entries of user in version order,
// after the position in token ("" from the first), read by after, and the
// token of the next page ("" on the last page).
func (c *Codec) Entries(ctx context.Context, after EntriesAfter, user string, pageSize int, token string) ([]ledger.Entry, string, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return nil, "", err
	}
	pageSize, err := ledger.PageSize(pageSize)
	if err != nil {
		return nil, "", err
	}
	return page(c, token, pageSize, true, []string{EntriesRead, user}, entryVersion, func(w Window) ([]ledger.Entry, error) {
		return after(ctx, user, w.After, w.Limit)
	})
}

// History is ListHistory: a page of user's history as q selects it (checked
// by HistoryQuery.Check), read by read, and the next page's token ("" on the
// last page). read returns the items of the window that q's types and time
// window select, in the window's order.
func (c *Codec) History(user string, q ledger.HistoryQuery, read func(ledger.HistoryQuery, Window) ([]ledger.Entry, error)) ([]ledger.Entry, string, error) {
	q, err := q.Check(user)
	if err != nil {
		return nil, "", err
	}
	return page(c, q.PageToken, q.PageSize, q.OldestFirst, HistoryScope(user, q), entryVersion, func(w Window) ([]ledger.Entry, error) {
		return read(q, w)
	})
}

// Holds is ListHolds: a page of user's holds in the states q asks for
// (checked by HoldQuery.Check), oldest first, read by read, and the next
// page's token ("" on the last page). read returns up to limit holds of
// the states q asks for, as they are now (Hold.StateAt), whose HOLD
// entries' versions are above after, in version order.
func (c *Codec) Holds(user string, q ledger.HoldQuery, read func(q ledger.HoldQuery, after int64, limit int) ([]ledger.Hold, error)) ([]ledger.Hold, string, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return nil, "", err
	}
	q, err := q.Check()
	if err != nil {
		return nil, "", err
	}
	scope := []string{HoldsRead, user, fmt.Sprint(q.States)}
	return page(c, q.PageToken, q.PageSize, true, scope, func(h ledger.Hold) int64 { return h.Version }, func(w Window) ([]ledger.Hold, error) {
		return read(q, w.After, w.Limit)
	})
}

func entryVersion(e ledger.Entry) int64 { return e.Version }

// HistoryScope is what a ListHistory token pages through: the user and the
// filters, so that a token is good only with the filters it was given for.
func HistoryScope(user string, q ledger.HistoryQuery) []string {
	h := sha256.New()
	fmt.Fprintf(h, "%v|%d|%d|%v", q.Types, q.Start.UnixNano(), q.End.UnixNano(), q.OldestFirst)
	return []string{HistoryRead, user, hex.EncodeToString(h.Sum(nil))[:16]}
}

// page reads the page of pageSize items after the position in token; an
// item's position is its version.
func page[T any](c *Codec, token string, pageSize int, oldestFirst bool, scope []string, version func(T) int64, read func(Window) ([]T, error)) ([]T, string, error) {
	// Ask for one more than a page: if it comes, there is a next page.
	w := Window{OldestFirst: oldestFirst, Limit: pageSize + 1}
	if token != "" {
		v, err := c.Decode(token, scope...)
		if err != nil {
			return nil, "", err
		}
		// The service gives a position only of an item it returned, and
		// newest first never that of version 1 (that page is the last),
		// but whoever holds the key could: the window's bounds would
		// overflow or cross, and the list start over.
		if v < 1 || v == math.MaxInt64 || (!oldestFirst && v == 1) {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken,
				"page_token is not one this service gave for this user and these filters")
		}
		if oldestFirst {
			w.After = v
		} else {
			w.Before = v
		}
	}
	items, err := read(w)
	if err != nil {
		return nil, "", err
	}
	if len(items) <= pageSize {
		return items, "", nil
	}
	items = items[:pageSize]
	return items, c.Encode(version(items[pageSize-1]), scope...), nil
}
