package memory

import (
	"fmt"
	"maps"
	"slices"
)

// Snapshot is every record a store (or a history) holds, each written out
// as text under a key of its own: what a test takes before and after a call
// to prove that the call wrote nothing, or exactly what it wrote. Anything
// written changes a record or adds one.
type Snapshot map[string]string

// Diff lists the keys of the records that after has and s has not (added),
// that both have with another text (changed), and that only s has
// (removed), each in order.
func (s Snapshot) Diff(after Snapshot) (added, changed, removed []string) {
	for _, k := range slices.Sorted(maps.Keys(after)) {
		was, ok := s[k]
		switch {
		case !ok:
			added = append(added, k)
		case was != after[k]:
			changed = append(changed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if _, ok := after[k]; !ok {
			removed = append(removed, k)
		}
	}
	return added, changed, removed
}

// RefusalPrefix starts the text of a request record that holds a refusal.
const RefusalPrefix = "refusal "

// Snapshot writes out every user's account (once it has one), entries,
// snapshots of the account and request records, a refusal's record with
// its refusal.
func (s *Store) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Snapshot{}
	for id, u := range s.users {
		if u.acct.Version > 0 {
			out[fmt.Sprintf("ledger %q account", id)] = fmt.Sprintf("%+v", u.acct)
		}
		for _, e := range u.entries {
			out[fmt.Sprintf("ledger %q entry %020d", id, e.Version)] = fmt.Sprintf("%+v", e)
		}
		for _, a := range u.snapshots { // of the account, every ledger.SnapshotEvery entries (asof.go)
			out[fmt.Sprintf("ledger %q snapshot %020d", id, a.Version)] = fmt.Sprintf("%+v", a)
		}
		for requestID, r := range u.requests {
			text := fmt.Sprintf("hash %s entry %d", r.hash, r.Version)
			if r.Refusal != nil {
				text = fmt.Sprintf("%shash %s %d %s: %s", RefusalPrefix, r.hash, r.Refusal.Kind, r.Refusal.Reason, r.Refusal.Message)
			}
			out[fmt.Sprintf("ledger %q request %q", id, requestID)] = text
		}
	}
	return out
}
