package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/pointledger/pointledger/internal/ledger"
)

var _ ledger.PointKinds = (*Store)(nil)

// kind is a point kind in memory, with the hashes of the requests that
// created and changed it.
type kind struct {
	ledger.PointKind
	requests map[string]string // request_id -> hash
}

// SetMaxKinds bounds the program's kinds (0: ledger.DefaultMaxKinds).
// Call it before the store is used.
func (s *Store) SetMaxKinds(n int) { s.maxKinds = n }

// snapshot is the kinds as Decide takes them; the memory store's are
// always the latest. Called under s.mu.
func (s *Store) snapshot() ledger.Kinds {
	ks := make(ledger.Kinds, len(s.kinds))
	for id, k := range s.kinds {
		ks[id] = k.PointKind
	}
	return ks
}

// Kinds is the program's kinds now (api.KindSource).
func (s *Store) Kinds(context.Context) (ledger.Kinds, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot(), nil
}

func (s *Store) CreatePointKind(_ context.Context, c ledger.KindChange) (ledger.PointKind, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil {
		s.kinds = map[string]*kind{}
	}
	if k, ok := s.kinds[c.Kind.ID]; ok {
		if hash, seen := k.requests[c.RequestID]; seen {
			return k.replay(c, hash)
		}
		return ledger.PointKind{}, false, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonKindExists, "point kind %q exists already", c.Kind.ID)
	}
	if max := cmp.Or(s.maxKinds, ledger.DefaultMaxKinds); len(s.kinds) >= max {
		return ledger.PointKind{}, false, ledger.TooManyKinds(max)
	}
	k := &kind{PointKind: c.Kind, requests: map[string]string{c.RequestID: c.Hash()}}
	k.CreateTime = s.now().UTC()
	k.UpdateTime = k.CreateTime
	s.kinds[c.Kind.ID] = k
	return k.PointKind, false, nil
}

func (s *Store) UpdatePointKind(_ context.Context, c ledger.KindChange) (ledger.PointKind, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kinds[c.Kind.ID]
	if !ok {
		return ledger.PointKind{}, false, ledger.PointKindNotFound(c.Kind.ID)
	}
	if hash, seen := k.requests[c.RequestID]; seen {
		return k.replay(c, hash)
	}
	created := k.CreateTime
	k.PointKind = c.Kind
	k.CreateTime, k.UpdateTime = created, s.now().UTC()
	k.requests[c.RequestID] = c.Hash()
	return k.PointKind, false, nil
}

func (k *kind) replay(c ledger.KindChange, hash string) (ledger.PointKind, bool, error) {
	if hash != c.Hash() {
		return ledger.PointKind{}, false, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused, "request_id %q was used for another change of point kind %q", c.RequestID, c.Kind.ID)
	}
	return k.PointKind, true, nil
}

func (s *Store) GetPointKind(_ context.Context, id string) (ledger.PointKind, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		return ledger.Standard, nil
	}
	k, ok := s.kinds[id]
	if !ok {
		return ledger.PointKind{}, ledger.PointKindNotFound(id)
	}
	return k.PointKind, nil
}

func (s *Store) ListPointKinds(context.Context) ([]ledger.PointKind, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []ledger.PointKind{ledger.Standard}
	for _, k := range s.kinds {
		out = append(out, k.PointKind)
	}
	slices.SortFunc(out[1:], func(a, b ledger.PointKind) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
