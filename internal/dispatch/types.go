package dispatch

import (
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// Endpoint is where events go: a URL, the event types it subscribed to and
// the secrets that sign for it. Secrets[0] is the current secret; a secret
// rotated out keeps signing beside it until its RetireTime.
type Endpoint struct {
	ID             string
	URL            string
	EventTypes     []string // as given: "*" or event type names (ledger.ParseSubscription)
	Subscription   ledger.Subscription
	Description    string
	Disabled       bool
	DisabledReason string // why, when the dispatcher disabled it (a 410) or an admin did
	CreateTime     time.Time
	Secrets        []SigningSecret
	// Redeliveries counts the redeliveries asked of the endpoint
	// (EndpointStore.CountRedelivery): a dispatcher trusts what it
	// remembers of users without a queue only while it is unchanged
	// (Dispatcher.noQueue).
	Redeliveries int64
}

// SigningSecret is one of an endpoint's secrets, with the end of its use:
// zero for the current secret, 24 h after the rotation for the old one.
type SigningSecret struct {
	Secret     webhook.Secret
	RetireTime time.Time
}

// SecretsAt returns the secrets that sign an attempt made at t: the
// current one and any old one not yet retired.
func (e Endpoint) SecretsAt(t time.Time) []webhook.Secret {
	var out []webhook.Secret
	for _, s := range e.Secrets {
		if s.RetireTime.IsZero() || t.Before(s.RetireTime) {
			out = append(out, s.Secret)
		}
	}
	return out
}

// DeliveryState is where a delivery of one event to one endpoint stands.
type DeliveryState string

const (
	DeliveryPending   DeliveryState = "PENDING"   // not yet answered with a 2xx, attempts left
	DeliverySucceeded DeliveryState = "SUCCEEDED" // a 2xx answered an attempt
	DeliveryFailed    DeliveryState = "FAILED"    // the last attempt failed; the user's next event went on
)

// Delivery is one event's delivery to one endpoint, as ListWebhookDeliveries
// shows it: one row per endpoint and event, updated at each attempt.
type Delivery struct {
	EndpointID      string
	EventID         string
	Type            ledger.EventType
	UserID          string
	Version         int64
	State           DeliveryState
	Attempts        int
	LastStatusCode  int    // 0 when no response came
	LastError       string // what went wrong at the last attempt, for a person; never a secret
	NextAttemptTime time.Time
	// Log is the delivery's attempt log, oldest first: every attempt
	// recorded on the row (each failed one and the one that succeeded),
	// the last MaxAttemptLog of them, kept across redeliveries (a
	// redelivery's attempts are appended; Attempts counts the current
	// round only).
	Log []Attempt
}

// Attempt is one attempt at delivering an event, as a delivery's log keeps
// it: when it was made, the receiver's HTTP status (0 when no response
// came), what went wrong (empty for a 2xx) and how long it took.
type Attempt struct {
	Time     time.Time
	Status   int
	Error    string
	Duration time.Duration
}

// MaxAttemptLog bounds a delivery's attempt log: a store keeps the last
// MaxAttemptLog attempts of each delivery and drops older ones.
const MaxAttemptLog = 20

// AppendAttempt is log with a appended, bounded to the last MaxAttemptLog.
func AppendAttempt(log []Attempt, a Attempt) []Attempt {
	out := append(log[:len(log):len(log)], a)
	if len(out) > MaxAttemptLog {
		out = out[len(out)-MaxAttemptLog:]
	}
	return out
}

// DeliveryQuery pages one endpoint's deliveries (ListWebhookDeliveries),
// newest event first, optionally of one user and in some states.
type DeliveryQuery struct {
	EndpointID string
	UserID     string          // "": every user
	States     []DeliveryState // none: every state
	// BelowVersion, with UserID, lists only the rows of the entries'
	// events below it (and every notice's); 0: all.
	BelowVersion int64
	ledger.Page
}

// Redelivery asks for an endpoint's events to be sent again, read from the
// ledger: a user's (UserID) or every user's the endpoint has a queue for,
// from FromVersion or from the first entry at or after StartTime (at most
// one of the two; neither: from the first entry the endpoint receives).
type Redelivery struct {
	EndpointID  string
	UserID      string
	FromVersion int64
	StartTime   time.Time
}
