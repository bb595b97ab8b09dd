package ledger

import (
	"slices"
	"strings"
)

// EventType is what a receiver of events (webhooks) is told happened. Every
// entry is one event, of the type EventTypeOf its entry type; the notice
// before points expire is the one event without an entry.
type EventType string

const (
	EventPointsGranted  EventType = "points.granted"
	EventPointsSpent    EventType = "points.spent"
	EventPointsRefunded EventType = "points.refunded"
	EventPointsAdjusted EventType = "points.adjusted"
	EventPointsExpired  EventType = "points.expired"
	EventPointsMatured  EventType = "points.matured"
	EventPointsReversed EventType = "points.reversed"
	EventHoldAuthorized EventType = "hold.authorized"
	EventHoldCaptured   EventType = "hold.captured"
	EventHoldReleased   EventType = "hold.released"
	// EventPointsExpiring is the notice a configured lead before a bucket
	// expires. No entry has this type.
	EventPointsExpiring EventType = "points.expiring"
)

// EventTypes is every event type, the notice last.
var EventTypes = []EventType{
	EventPointsGranted, EventPointsSpent, EventPointsRefunded, EventPointsAdjusted,
	EventPointsExpired, EventPointsMatured, EventPointsReversed,
	EventHoldAuthorized, EventHoldCaptured, EventHoldReleased,
	EventPointsExpiring,
}

// EventTypeOf returns the type of the event an entry of type t is, or ""
// if t is no entry type. The switch has no default on purpose: the
// exhaustive linter names it when an entry type is added without its event.
func EventTypeOf(t EntryType) EventType {
	switch t {
	case EntryGrant:
		return EventPointsGranted
	case EntryPurchase:
		return EventPointsSpent
	case EntryRefund:
		return EventPointsRefunded
	case EntryAdjustment:
		return EventPointsAdjusted
	case EntryExpiration:
		return EventPointsExpired
	case EntryMaturation:
		return EventPointsMatured
	case EntryReversal:
		return EventPointsReversed
	case EntryHold:
		return EventHoldAuthorized
	case EntryCapture:
		return EventHoldCaptured
	case EntryRelease:
		return EventHoldReleased
	}
	return ""
}

// AllEventTypes, alone in a subscription, subscribes to every event type,
// including the ones added later.
const AllEventTypes = "*"

// Subscription is the event types an endpoint receives. The zero value
// receives nothing; ParseSubscription makes the others.
type Subscription struct {
	all   bool
	types []EventType
}

// ParseSubscription checks the event type names an endpoint asks for: "*"
// alone, or one or more known types, each once. Anything else is refused
// with INVALID_EVENT_TYPE, so that a misspelt type is not a subscription
// that silently never fires.
func ParseSubscription(names []string) (Subscription, error) {
	if len(names) == 0 {
		return Subscription{}, Errorf(KindInvalid, ReasonInvalidEventType,
			"event_types: name at least one event type, or %q for all", AllEventTypes)
	}
	if slices.Contains(names, AllEventTypes) {
		if len(names) > 1 {
			return Subscription{}, Errorf(KindInvalid, ReasonInvalidEventType,
				"event_types: %q stands alone: it already means every type", AllEventTypes)
		}
		return Subscription{all: true}, nil
	}
	types := make([]EventType, 0, len(names))
	for _, name := range names {
		t := EventType(name)
		if !slices.Contains(EventTypes, t) {
			return Subscription{}, Errorf(KindInvalid, ReasonInvalidEventType,
				"event_types: %q is not an event type (known: %s)", clip(name), knownEventTypes())
		}
		if slices.Contains(types, t) {
			return Subscription{}, Errorf(KindInvalid, ReasonInvalidEventType,
				"event_types: %q is named twice", clip(name))
		}
		types = append(types, t)
	}
	return Subscription{types: types}, nil
}

// Includes says whether the subscription receives events of type t.
func (s Subscription) Includes(t EventType) bool {
	if s.all {
		return slices.Contains(EventTypes, t)
	}
	return slices.Contains(s.types, t)
}

// Names returns the subscription as ParseSubscription reads it: ["*"], or
// the types in the order they were named.
func (s Subscription) Names() []string {
	if s.all {
		return []string{AllEventTypes}
	}
	names := make([]string, len(s.types))
	for i, t := range s.types {
		names[i] = string(t)
	}
	return names
}

func knownEventTypes() string {
	names := make([]string, len(EventTypes))
	for i, t := range EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// clip keeps an offending value short enough to quote in a message.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
