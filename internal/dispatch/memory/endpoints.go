package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// The endpoints, as dispatch.EndpointStore keeps them.

// Create is dispatch.EndpointStore's.
func (s *Store) Create(_ context.Context, e dispatch.Endpoint) (dispatch.Endpoint, webhook.Secret, error) {
	now := s.now().UTC()
	secret := webhook.NewSecret()
	e.ID = s.ids.New(now)
	e.CreateTime = now
	e.Disabled, e.DisabledReason = false, ""
	e.Secrets = []dispatch.SigningSecret{{Secret: secret}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints[e.ID] = endpoint{e: clone(e), rvn: 1}
	return e, secret, nil
}

func clone(e dispatch.Endpoint) dispatch.Endpoint {
	e.EventTypes, e.Secrets = slices.Clone(e.EventTypes), slices.Clone(e.Secrets)
	e.Subscription = ledger.Subscription{}
	return e
}

// get returns the endpoint id as kept, its subscription read from its
// event types.
func (s *Store) get(id string) (dispatch.Endpoint, int64, error) {
	s.mu.Lock()
	kept, ok := s.endpoints[id]
	s.mu.Unlock()
	if !ok {
		return dispatch.Endpoint{}, 0, dispatch.EndpointNotFound(id)
	}
	e := clone(kept.e)
	sub, err := ledger.ParseSubscription(e.EventTypes)
	if err != nil {
		return e, 0, fmt.Errorf("endpoint %s: stored event types: %w", e.ID, err)
	}
	e.Subscription = sub
	return e, kept.rvn, nil
}

// Get is dispatch.EndpointStore's.
func (s *Store) Get(_ context.Context, id string) (dispatch.Endpoint, error) {
	e, _, err := s.get(id)
	return e, err
}

// List is dispatch.EndpointStore's: by id (ULIDs: oldest first).
func (s *Store) List(_ context.Context) ([]dispatch.Endpoint, error) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.endpoints))
	for id := range s.endpoints {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	slices.Sort(ids)
	var out []dispatch.Endpoint
	for _, id := range ids {
		e, _, err := s.get(id)
		if ledger.ReasonOf(err) == ledger.ReasonEndpointNotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Page is dispatch.EndpointStore's.
func (s *Store) Page(ctx context.Context, after string, size int) ([]dispatch.Endpoint, string, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, "", err
	}
	start, _ := slices.BinarySearchFunc(all, after, func(e dispatch.Endpoint, id string) int { return cmp.Compare(e.ID, id) })
	for start < len(all) && all[start].ID == after {
		start++
	}
	rest := all[start:]
	if len(rest) <= size {
		return rest, "", nil
	}
	return rest[:size], rest[size-1].ID, nil
}

// replace writes e if it is still at rvn.
func (s *Store) replace(e dispatch.Endpoint, rvn int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept, ok := s.endpoints[e.ID]
	if !ok || kept.rvn != rvn {
		return dispatch.ErrEndpointChanged
	}
	s.endpoints[e.ID] = endpoint{e: clone(e), rvn: rvn + 1}
	return nil
}

// Update is dispatch.EndpointStore's.
func (s *Store) Update(_ context.Context, id string, change func(*dispatch.Endpoint) error) (dispatch.Endpoint, error) {
	return dispatch.UpdateEndpoint(id, func() (dispatch.Endpoint, int64, error) { return s.get(id) }, s.replace, change)
}

// Disable is dispatch.EndpointStore's.
func (s *Store) Disable(ctx context.Context, id, reason string) error {
	return dispatch.DisableEndpoint(ctx, s, id, reason)
}

// Rotate is dispatch.EndpointStore's.
func (s *Store) Rotate(_ context.Context, id string) (webhook.Secret, error) {
	e, rvn, err := s.get(id)
	if err != nil {
		return webhook.Secret{}, err
	}
	secret, secrets := dispatch.RotatedSecrets(e.Secrets, s.now())
	e.Secrets = secrets
	if err := s.replace(e, rvn); err != nil {
		return webhook.Secret{}, err
	}
	return secret, nil
}

// CountRedelivery is dispatch.EndpointStore's.
func (s *Store) CountRedelivery(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept, ok := s.endpoints[id]
	if !ok {
		return dispatch.EndpointNotFound(id)
	}
	kept.e.Redeliveries++
	kept.rvn++
	s.endpoints[id] = kept
	return nil
}

// Delete is dispatch.EndpointStore's.
func (s *Store) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.endpoints[id]; !ok {
		return dispatch.EndpointNotFound(id)
	}
	delete(s.endpoints, id)
	return nil
}
