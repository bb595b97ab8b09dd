package memory

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// History is a history projection in memory, kept as package projection
// keeps it in DynamoDB: for each user, a copy of the entries in version
// order (a purchase's refunded amount being the sum of the refunds applied
// after it, a grant's reversed amount the sum of its reversals) and a
// state folded with history.State.Add. It follows a Store: the store tells
// it of each entry as it commits, so it does not trail the ledger as the
// projector does, unless paused (Pause) to stand for a projector that
// lags. A user whose entries it missed (committed before it followed)
// stays behind until Rebuild, as versions are applied in order only.
type History struct {
	store  *Store
	tokens *pagetoken.Codec

	mu      sync.Mutex
	users   map[string]*userHistory
	paused  bool
	pending []ledger.Entry // committed while paused, in commit order
}

type userHistory struct {
	items  []ledger.Entry // items[i] has version i+1
	state  history.State
	writes int // commits to it, so that a rebuild that changes nothing is a write too
}

// NewHistory returns an empty history that follows s from now on.
func NewHistory(s *Store) *History {
	h := &History{store: s, tokens: pagetoken.Derived("memory history"), users: map[string]*userHistory{}}
	s.Follow(h.follow)
	return h
}

// follow applies an entry the store committed (under the store's lock), or
// keeps it for Resume while paused.
func (h *History) follow(e ledger.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused {
		h.pending = append(h.pending, e)
		return
	}
	h.applyFollowed(e)
}

// Pause makes the history trail the store, as history trails the ledger
// while the projector lags or is stopped: what the store commits from now
// on is applied only by Resume.
func (h *History) Pause() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = true
}

// Resume applies what the store committed while the history was paused,
// in commit order, and follows the store again.
func (h *History) Resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.pending {
		h.applyFollowed(e)
	}
	h.paused, h.pending = false, nil
}

func (h *History) applyFollowed(e ledger.Entry) {
	u, ok := h.users[e.UserID]
	if !ok {
		u = &userHistory{state: history.State{UserID: e.UserID}}
		h.users[e.UserID] = u
	}
	if e.Version == u.state.Version+1 {
		u.apply(e)
		u.writes++
	}
}

// apply appends the next entry as the projector applies it: an entry that
// keeps a running amount (a purchase's or capture's refunded amount, a
// grant's reversed amount) starts with nothing, and the entries that add
// to it (refunds, reversals) add to it as they are applied
// (history.AddsTo), so that history.Compare finds it in step.
func (u *userHistory) apply(e ledger.Entry) {
	e = history.WithRunning(e, decimal.Zero)
	if v, amount, ok := history.AddsTo(e); ok && v >= 1 && v <= int64(len(u.items)) {
		earlier := &u.items[v-1]
		running, _ := history.Running(*earlier)
		*earlier = history.WithRunning(*earlier, running.Add(amount))
	}
	u.items = append(u.items, e)
	u.state = u.state.Add(e)
}

// List returns a page of user's history and the next page's token ("" on
// the last page), checked and paged as every history is
// (pagetoken.List).
func (h *History) List(_ context.Context, user string, q ledger.HistoryQuery) ([]ledger.Entry, string, error) {
	return pagetoken.List(h.tokens, user, q, func(q ledger.HistoryQuery, w pagetoken.Window) ([]ledger.Entry, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		u, ok := h.users[user]
		if !ok {
			return nil, nil
		}
		var out []ledger.Entry
		n := len(u.items)
		for i := 0; i < n && len(out) < w.Limit; i++ {
			e := u.items[i]
			if !q.OldestFirst {
				e = u.items[n-1-i]
			}
			switch {
			case q.OldestFirst && e.Version <= w.After,
				!q.OldestFirst && w.Before > 0 && e.Version >= w.Before,
				len(q.Types) > 0 && !slices.Contains(q.Types, e.Type),
				!q.Start.IsZero() && e.CreateTime.Before(q.Start),
				!q.End.IsZero() && !e.CreateTime.Before(q.End):
				continue
			}
			out = append(out, e)
		}
		return out, nil
	})
}

// Items returns all of a user's history items, oldest first.
func (h *History) Items(_ context.Context, user string) ([]ledger.Entry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.users[user]; ok {
		return slices.Clone(u.items), nil
	}
	return nil, nil
}

// State returns a user's projection state; a user never projected has
// version 0.
func (h *History) State(_ context.Context, user string) (history.State, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.users[user]; ok {
		return u.state, nil
	}
	return history.State{UserID: user}, nil
}

// Rebuild replaces a user's history with one made from the store's entries.
// Entries the store commits meanwhile reach the old copy (the store tells
// the history under its own lock, which the read of the entries does not
// hold); they are applied again on top of the rebuilt one.
func (h *History) Rebuild(ctx context.Context, user string) error {
	entries, err := h.store.EntriesAfter(ctx, user, 0, math.MaxInt)
	if err != nil {
		return fmt.Errorf("rebuild %q: %w", user, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.users[user]
	if !had && len(entries) == 0 {
		return nil
	}
	u := &userHistory{state: history.State{UserID: user}}
	for _, e := range entries {
		u.apply(e)
	}
	if had {
		if len(old.items) > len(entries) {
			for _, e := range old.items[len(entries):] {
				u.apply(e)
			}
		}
		u.writes = old.writes
	}
	u.writes++
	h.users[user] = u
	return nil
}

// RebuildAll rebuilds the history of every user with entries.
func (h *History) RebuildAll(ctx context.Context) (int, error) {
	users := h.store.UserIDs()
	for _, u := range users {
		if err := h.Rebuild(ctx, u); err != nil {
			return 0, err
		}
	}
	return len(users), nil
}

// Snapshot writes out every user's history items and state (with how often
// it was written).
func (h *History) Snapshot() Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Snapshot{}
	for id, u := range h.users {
		st := u.state
		out[fmt.Sprintf("history %q state", id)] = fmt.Sprintf("version %d balance %s %s last entry %s writes %d",
			st.Version, st.Balance, st.Totals, st.LastEntry.Format(time.RFC3339Nano), u.writes)
		for _, e := range u.items {
			out[fmt.Sprintf("history %q item %020d", id, e.Version)] = fmt.Sprintf("%+v", e)
		}
	}
	return out
}
