package dispatchtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// clock is a settable time for tests of what time decides (a rotation's overlap).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newEndpoints(t *testing.T, newEnv NewEnv) (dispatch.EndpointStore, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return newEnv(t, c.Now).Store, c
}

func endpoint(url string, types ...string) dispatch.Endpoint {
	return dispatch.Endpoint{URL: url, EventTypes: types, Description: "crm"}
}

func testEndpointsRoundTrip(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	s, c := newEndpoints(t, newEnv)
	ctx := context.Background()
	made, secret, err := s.Create(ctx, endpoint("https://crm.example/hook", "points.granted", "points.spent"))
	if err != nil {
		t.Fatal(err)
	}
	if made.ID == "" || !made.CreateTime.Equal(c.Now()) || secret.IsZero() {
		t.Fatalf("created %+v with secret zero=%v: want an id, the time now and a secret", made, secret.IsZero())
	}
	got, err := s.Get(ctx, made.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != made.URL || !slices.Equal(got.EventTypes, made.EventTypes) || got.Description != "crm" ||
		!got.CreateTime.Equal(made.CreateTime) || got.Disabled {
		t.Errorf("read back %+v, want %+v", got, made)
	}
	if !got.Subscription.Includes(ledger.EventPointsSpent) || got.Subscription.Includes(ledger.EventPointsExpired) {
		t.Errorf("subscription read back wrong: %+v", got.Subscription)
	}
	signers := got.SecretsAt(c.Now())
	if len(signers) != 1 || signers[0].Text() != secret.Text() {
		t.Errorf("the stored secret is not the one shown")
	}
	// A second later: ids sort by their time, and two made in one
	// millisecond fall in either order.
	c.Add(time.Second)
	second, _, err := s.Create(ctx, endpoint("https://mail.example/hook", "*"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != made.ID || all[1].ID != second.ID {
		t.Errorf("List = %d endpoints, want both, oldest first", len(all))
	}
}

func testEndpointNotFound(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	s, _ := newEndpoints(t, newEnv)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"get":     func() error { _, err := s.Get(ctx, "nope"); return err },
		"delete":  func() error { return s.Delete(ctx, "nope") },
		"rotate":  func() error { _, err := s.Rotate(ctx, "nope"); return err },
		"disable": func() error { return s.Disable(ctx, "nope", "gone") },
		"update": func() error {
			_, err := s.Update(ctx, "nope", func(*dispatch.Endpoint) error { return nil })
			return err
		},
	} {
		if e, ok := ledger.AsError(call()); !ok || e.Reason != ledger.ReasonEndpointNotFound || e.Kind != ledger.KindNotFound {
			t.Errorf("%s of an unknown endpoint: %v, want not found %s", name, call(), ledger.ReasonEndpointNotFound)
		}
	}
}

func testRotationSignsWithBothSecretsForADay(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	s, c := newEndpoints(t, newEnv)
	ctx := context.Background()
	e, first, err := s.Create(ctx, endpoint("https://crm.example/hook", "*"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Rotate(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, e.ID)
	texts := func(at time.Time) []string {
		var out []string
		for _, x := range got.SecretsAt(at) {
			out = append(out, x.Text())
		}
		return out
	}
	if want := []string{second.Text(), first.Text()}; !slices.Equal(texts(c.Now()), want) {
		t.Errorf("just after the rotation, %d secrets sign, want the new and the old", len(texts(c.Now())))
	}
	if got := texts(c.Now().Add(dispatch.RotationOverlap - time.Nanosecond)); len(got) != 2 {
		t.Errorf("one instant before the overlap ends, %d secrets sign, want 2", len(got))
	}
	if got := texts(c.Now().Add(dispatch.RotationOverlap)); !slices.Equal(got, []string{second.Text()}) {
		t.Errorf("once the overlap ends, %d secrets sign, want only the new one", len(got))
	}
	// A second rotation within the day drops the first secret at once:
	// only the one it replaces keeps signing.
	c.Add(time.Hour)
	third, err := s.Rotate(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, e.ID)
	if want := []string{third.Text(), second.Text()}; !slices.Equal(texts(c.Now()), want) {
		t.Errorf("after a second rotation, want the third and second secrets to sign")
	}
}

func testUpdateKeepsIdentityAndRetriesALostRace(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	s, _ := newEndpoints(t, newEnv)
	ctx := context.Background()
	e, secret, err := s.Create(ctx, endpoint("https://crm.example/hook", "*"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Update(ctx, e.ID, func(x *dispatch.Endpoint) error {
		x.URL = "https://crm.example/v2"
		x.ID, x.Secrets = "other", nil // ignored: identity and secrets are not the caller's to change
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != "https://crm.example/v2" || got.ID != e.ID || len(got.Secrets) != 1 || got.Secrets[0].Secret.Text() != secret.Text() {
		t.Errorf("update gave %+v, want the new URL with the same id and secret", got)
	}
	// Another writer changes the endpoint between Update's read and its
	// write, once: Update applies its change again to what that writer
	// left, and loses neither.
	raced := false
	got, err = s.Update(ctx, e.ID, func(x *dispatch.Endpoint) error {
		if !raced {
			raced = true
			if err := s.Disable(ctx, e.ID, "an admin"); err != nil {
				t.Fatal(err)
			}
		}
		x.Description = "kept"
		return nil
	})
	if err != nil {
		t.Fatalf("update racing a disable: %v", err)
	}
	got, _ = s.Get(ctx, e.ID)
	if !got.Disabled || got.DisabledReason != "an admin" || got.Description != "kept" {
		t.Errorf("after the race: %+v, want the disable and the update both kept", got)
	}
	// A writer that moves the endpoint at every read: Update gives up.
	_, err = s.Update(ctx, e.ID, func(x *dispatch.Endpoint) error {
		if _, err := s.Rotate(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	if !errors.Is(err, dispatch.ErrEndpointChanged) {
		t.Errorf("update racing a rotation at every read: %v, want ErrEndpointChanged", err)
	}
	if err := s.Disable(ctx, e.ID, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	if got, _ = s.Get(ctx, e.ID); got.DisabledReason != "an admin" {
		t.Errorf("disabling again changed the reason to %q, want the first kept", got.DisabledReason)
	}
	if err := s.Delete(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, e.ID); err == nil {
		t.Errorf("a deleted endpoint is still read")
	}
}

// Page goes through the endpoints oldest first (by id), size by size,
// each once, from any endpoint's id; at the end no next.
func testEndpointsPage(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	s, c := newEndpoints(t, newEnv)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		if i%2 == 0 {
			c.Add(time.Second) // two at each instant
		}
		e, _, err := s.Create(ctx, endpoint(fmt.Sprintf("https://crm.example/hook/%d", i), "*"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	if !slices.IsSorted(ids) {
		t.Fatalf("ids %v: want them in creation order", ids)
	}
	for size := 1; size <= 6; size++ {
		var got []string
		after, pages := "", 0
		for {
			page, next, err := s.Page(ctx, after, size)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > size || (next != "" && (len(page) != size || next != page[len(page)-1].ID)) {
				t.Fatalf("size %d after %q: %d endpoints, next %q", size, after, len(page), next)
			}
			for _, e := range page {
				got = append(got, e.ID)
			}
			if next == "" || pages > 10 {
				break
			}
			after = next
		}
		if !slices.Equal(got, ids) {
			t.Errorf("size %d: paged %v, want %v", size, got, ids)
		}
	}
	rest, next, err := s.Page(ctx, ids[2], 10)
	if err != nil || next != "" || !slices.Equal(endpointIDs(rest), ids[3:]) {
		t.Errorf("after the third: %v next %q (%v), want %v and no next", endpointIDs(rest), next, err, ids[3:])
	}
}

func endpointIDs(eps []dispatch.Endpoint) []string {
	ids := make([]string, len(eps))
	for i, e := range eps {
		ids[i] = e.ID
	}
	return ids
}
