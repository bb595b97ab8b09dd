package pagetoken

import (
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
	// StatementRead pages GetStatement's entries, in version order.
	StatementRead = "GetStatement"
)

// Window is the versions one page reads, in the order of its query
// (ledger.HistoryQuery.OldestFirst; entries and holds are listed oldest
// first).
type Window struct {
	After  int64 // oldest first: versions above After
	Before int64 // newest first: versions below Before; 0: from the newest
	Limit  int   // at most this many items
}

// Query is a list query of package ledger: it checks itself for a user
// (the user id too), and embeds the ledger.Page it asks for. Its type
// names the list, its order and its items.
type Query[Q any] interface {
	ledger.EntryQuery | ledger.HistoryQuery | ledger.HoldQuery | ledger.StatementQuery
	Check(user string) (Q, error)
	Paged() ledger.Page
}

// Item is what a list returns: entries (ListEntries, ListHistory) or holds
// (ListHolds). An item's position in its list is its version.
type Item interface {
	ledger.Entry | ledger.Hold
}

// List is every paged read: a page of user's list as q (checked by its
// Check) asks for it, read by read, and the next page's token ("" on the
// last page). read returns up to w.Limit items of the window w, as q
// selects them, in q's order. An item's position, which a token holds, is
// its version.
func List[Q Query[Q], T Item](c *Codec, user string, q Q, read func(Q, Window) ([]T, error)) ([]T, string, error) {
	q, err := q.Check(user)
	if err != nil {
		return nil, "", err
	}
	p := q.Paged()
	scope, oldestFirst := listOf(user, q)
	// Ask for one more than a page: if it comes, there is a next page.
	w := Window{Limit: p.PageSize + 1}
	if p.PageToken != "" {
		v, err := c.Decode(p.PageToken, scope...)
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
	items, err := read(q, w)
	if err != nil {
		return nil, "", err
	}
	if len(items) <= p.PageSize {
		return items, "", nil
	}
	items = items[:p.PageSize]
	return items, c.Encode(version(items[p.PageSize-1]), scope...), nil
}

// listOf is what a token of q pages through (its scope: the read, the user
// and the filters), and whether q lists oldest first.
func listOf(user string, q any) (scope []string, oldestFirst bool) {
	switch q := q.(type) {
	case ledger.HistoryQuery:
		return HistoryScope(user, q), q.OldestFirst
	case ledger.HoldQuery:
		return []string{HoldsRead, user, fmt.Sprint(q.States)}, true
	case ledger.StatementQuery: // checked: its times are at the stores' precision
		return []string{StatementRead, user, fmt.Sprint(q.Start.UnixMicro()), fmt.Sprint(q.End.UnixMicro())}, true
	default: // ledger.EntryQuery, as Query allows no other
		return []string{EntriesRead, user}, true
	}
}

// version is an item's position in its list.
func version[T Item](item T) int64 {
	switch it := any(item).(type) {
	case ledger.Hold:
		return it.Version
	case ledger.Entry:
		return it.Version
	}
	return 0 // Item allows no other
}

// HistoryScope is what a ListHistory token pages through: the user and the
// filters, so that a token is good only with the filters it was given for.
func HistoryScope(user string, q ledger.HistoryQuery) []string {
	h := sha256.New()
	fmt.Fprintf(h, "%v|%d|%d|%v", q.Types, q.Start.UnixNano(), q.End.UnixNano(), q.OldestFirst)
	return []string{HistoryRead, user, hex.EncodeToString(h.Sum(nil))[:16]}
}
