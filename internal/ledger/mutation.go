package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Limits on what a request may carry. Ids become parts of DynamoDB keys, so
// their alphabet excludes the key separator '#' and anything invisible.
const (
	MaxIDLength       = 128
	MaxOrderIDBytes   = 256
	MaxMetadataKeys   = 16
	MaxMetadataKey    = 64
	MaxMetadataValue  = 256
	MaxMetadataTotal  = 2048
	idAlphabetComment = "letters, digits and . _ : @ + -"
)

// Request is a mutation as it arrives, before validation.
type Request struct {
	UserID            string
	RequestID         string
	Amount            string
	OrderID           string
	Metadata          map[string]string
	PurchaseRequestID string // refunds only
	// Captures and voids: the hold they resolve (its request_id). A
	// capture's Amount may be "": all of the hold.
	HoldRequestID string

	// Adjustments only.
	Debit           bool   // take points away instead of adding them
	Reason          string // why; required
	ExplainBalance  bool   // record the amount without moving the balance (see Mutation)
	ExpectedBalance string // with ExplainBalance: the balance the account must have

	// Credits (grants, credit adjustments): when the points expire; zero:
	// never. Holds: when the hold lets go; required. The API resolves a
	// request's expire_time or ttl to it.
	Expire time.Time
	// ExpireSpec is what the request said of its expiry, as sent: a ttl
	// resolves to another Expire on each retry, and a retry must hash as
	// the request did ("" with an Expire: the Expire itself).
	ExpireSpec string

	// Credits: when the points become spendable; zero: at once. The API
	// resolves a request's effective_time or effective_delay to it.
	Effective time.Time
	// EffectiveSpec is what the request said of it, as ExpireSpec is of
	// the expiry ("" with an Effective: the Effective itself).
	EffectiveSpec string
	// Reversals: the grant they take back (its request_id). A reversal's
	// Amount may be "": all that is left of the grant. Its Reason (may be
	// empty) says why.
	GrantRequestID string
	// Grants only: the budget the points come from (see budget.go).
	BudgetID string
	// Credits (grants, credit adjustments): the kind of their points, as
	// named on the wire ("" or "standard": standard).
	Kind string
	// Purchases and holds: where the points are spent (kind.go); each may
	// be "".
	MerchantID string
	Category   string
}

// Mutation is a validated request to append one entry to a user's ledger.
//
// An adjustment normally moves the balance by its amount, like a grant or a
// purchase. With ExplainBalance it does not: the balance stays, and the
// entry records the amount by which the account's balance differs from the
// fold of its entries, so that the two agree again. That is how a balance
// that disagrees with its entries is repaired without rewriting either; it
// applies only while the balance is still ExpectedBalance.
type Mutation struct {
	Type              EntryType
	UserID            string
	RequestID         string
	Amount            decimal.Decimal // positive (a capture: zero for all of its hold); Delta gives the signed change
	OrderID           string
	Metadata          map[string]string
	PurchaseRequestID string
	HoldRequestID     string
	Debit             bool
	Reason            string
	ExplainBalance    bool
	ExpectedBalance   decimal.Decimal
	// Credits: when the points expire; zero: never. The API turns a
	// request's expire_time or ttl into it, within the program's limits.
	// NewMutation keeps it, and Effective, to the microsecond (Instant),
	// as the stores keep times: a bucket a write path caches must be the
	// one its store reads back (a refund's draws, read from its purchase,
	// name that expiry), else one bucket becomes two a nanosecond apart.
	Expire time.Time
	// ExpireSpec is what the request said of its expiry, which its Hash
	// covers (see Request.ExpireSpec).
	ExpireSpec string
	// Credits: when the points become spendable (zero: at once); until
	// then they are pending. EffectiveSpec is what the request said of it.
	Effective     time.Time
	EffectiveSpec string
	// Reversals: the grant they take back.
	GrantRequestID string
	// BudgetID: a grant from a budget (see budget.go).
	BudgetID string
	// Credits: the kind of the points ("": standard).
	Kind string
	// Purchases and holds: where the points are spent.
	MerchantID string
	Category   string
}

// MaxReasonBytes bounds an adjustment's reason.
const MaxReasonBytes = 512

// NewMutation validates r as a mutation of type t. Amounts may have at most
// scale digits after the point.
func NewMutation(t EntryType, r Request, scale int32) (Mutation, error) {
	if err := ValidateUserID(r.UserID); err != nil {
		return Mutation{}, err
	}
	if err := validateID("request_id", ReasonInvalidRequestID, r.RequestID); err != nil {
		return Mutation{}, err
	}
	var amount decimal.Decimal
	switch {
	case t == EntryRelease && r.Amount != "":
		return Mutation{}, Errorf(KindInvalid, ReasonInvalidAmount, "a void releases all of its hold: it takes no amount")
	case t == EntryRelease, t == EntryCapture && r.Amount == "", t == EntryReversal && r.Amount == "":
	default:
		var err error
		if amount, err = ParseAmount(r.Amount, scale); err != nil {
			return Mutation{}, err
		}
	}
	if err := validateOrderID(r.OrderID); err != nil {
		return Mutation{}, err
	}
	if err := validateMetadata(r.Metadata); err != nil {
		return Mutation{}, err
	}
	m := Mutation{
		Type:              t,
		UserID:            r.UserID,
		RequestID:         r.RequestID,
		Amount:            amount,
		OrderID:           r.OrderID,
		Metadata:          r.Metadata,
		PurchaseRequestID: r.PurchaseRequestID,
		HoldRequestID:     r.HoldRequestID,
		GrantRequestID:    r.GrantRequestID,
	}
	if err := m.setEffective(t, r); err != nil {
		return Mutation{}, err
	}
	if !r.Expire.IsZero() {
		if info, _ := t.Info(); (!info.Expires || r.Debit || r.ExplainBalance) && t != EntryHold {
			return Mutation{}, Errorf(KindInvalid, ReasonInvalidExpiry, "only grants, credit adjustments and holds expire")
		}
		m.Expire = Instant(r.Expire)
	}
	if t == EntryHold && m.Expire.IsZero() {
		return Mutation{}, Errorf(KindInvalid, ReasonInvalidExpiry, "a hold needs an expiry")
	}
	m.ExpireSpec = r.ExpireSpec
	if m.ExpireSpec == "" && !m.Expire.IsZero() {
		m.ExpireSpec = "at " + m.Expire.Format(time.RFC3339Nano)
	}
	if err := m.setReferences(t, r); err != nil {
		return Mutation{}, err
	}
	if err := m.setKind(t, r); err != nil {
		return Mutation{}, err
	}
	switch t {
	case EntryGrant, EntryPurchase, EntryHold:
	case EntryCapture, EntryRelease:
		if err := validateID("hold_request_id", ReasonInvalidHold, r.HoldRequestID); err != nil {
			return Mutation{}, err
		}
	case EntryRefund:
		if err := validateID("purchase_request_id", ReasonInvalidRequestID, r.PurchaseRequestID); err != nil {
			return Mutation{}, err
		}
	case EntryAdjustment:
		if strings.TrimSpace(r.Reason) == "" || len(r.Reason) > MaxReasonBytes || !printable(r.Reason) {
			return Mutation{}, Errorf(KindInvalid, ReasonInvalidAdjustment, "an adjustment needs a reason: printable text of at most %d bytes", MaxReasonBytes)
		}
		m.Debit, m.Reason, m.ExplainBalance = r.Debit, r.Reason, r.ExplainBalance
		if r.ExplainBalance {
			b, err := ParseBalance(r.ExpectedBalance, scale)
			if e, ok := AsError(err); ok {
				return Mutation{}, Errorf(KindInvalid, ReasonInvalidAdjustment, "explain_balance needs expected_balance, the account's balance now: %s", e.Message)
			}
			m.ExpectedBalance = b
		} else if r.ExpectedBalance != "" {
			return Mutation{}, Errorf(KindInvalid, ReasonInvalidAdjustment, "expected_balance goes with explain_balance")
		}
	case EntryReversal:
		if err := validateID("grant_request_id", ReasonInvalidRequestID, r.GrantRequestID); err != nil {
			return Mutation{}, err
		}
		if len(r.Reason) > MaxReasonBytes || !printable(r.Reason) {
			return Mutation{}, Errorf(KindInvalid, ReasonInvalidReason, "reason must be printable text of at most %d bytes", MaxReasonBytes)
		}
		m.Reason = r.Reason
	case EntryExpiration, EntryMaturation:
		return Mutation{}, Errorf(KindInvalid, ReasonInvalidAmount, "only the ledger writes %s entries", t)
	default:
		return Mutation{}, Errorf(KindInvalid, ReasonInvalidAmount, "unknown entry type %q", t)
	}
	return m, nil
}

// setReferences checks that r names a purchase, a grant, a hold or a
// budget, and uses an adjustment's fields, only where its type t does,
// and takes the budget it names.
func (m *Mutation) setReferences(t EntryType, r Request) error {
	if t != EntryRefund && r.PurchaseRequestID != "" {
		return Errorf(KindInvalid, ReasonInvalidRequestID, "purchase_request_id is only for refunds")
	}
	if t != EntryReversal && r.GrantRequestID != "" {
		return Errorf(KindInvalid, ReasonInvalidRequestID, "grant_request_id is only for reversals")
	}
	if r.BudgetID != "" {
		if t != EntryGrant && (t != EntryAdjustment || !r.Debit || r.ExplainBalance) {
			return Errorf(KindInvalid, ReasonInvalidBudget, "budget_id is only for grants, and for debit adjustments that give points back to their budget")
		}
		if err := ValidateBudgetID(r.BudgetID); err != nil {
			return err
		}
		m.BudgetID = r.BudgetID
	}
	if info, _ := t.Info(); !info.ResolvesHold && r.HoldRequestID != "" {
		return Errorf(KindInvalid, ReasonInvalidHold, "hold_request_id is only for captures and voids")
	}
	if t != EntryAdjustment && (r.Debit || (r.Reason != "" && t != EntryReversal) || r.ExplainBalance || r.ExpectedBalance != "") {
		return Errorf(KindInvalid, ReasonInvalidAdjustment, "debit, reason and explain_balance are only for adjustments")
	}
	return nil
}

// setKind checks that only a credit names a kind and only a purchase or a
// hold says where it spends, and takes them.
func (m *Mutation) setKind(t EntryType, r Request) error {
	if r.Kind != "" {
		if info, _ := t.Info(); !info.Expires || r.Debit || r.ExplainBalance {
			return Errorf(KindInvalid, ReasonInvalidKind, "kind is only for grants and credit adjustments")
		}
		k, err := validateKindOf(r.Kind)
		if err != nil {
			return err
		}
		m.Kind = k
	}
	if r.MerchantID != "" || r.Category != "" {
		if t != EntryPurchase && t != EntryHold {
			return Errorf(KindInvalid, ReasonInvalidMerchant, "merchant_id and category are only for purchases and authorizations")
		}
		if err := validateWhere("merchant_id", ReasonInvalidMerchant, r.MerchantID); err != nil {
			return err
		}
		if err := validateWhere("category", ReasonInvalidCategory, r.Category); err != nil {
			return err
		}
		m.MerchantID, m.Category = r.MerchantID, r.Category
	}
	return nil
}

// setEffective validates r's effective time: only a credit a grant or a
// credit adjustment makes has one, and its points must not expire before
// they are spendable.
func (m *Mutation) setEffective(t EntryType, r Request) error {
	if r.Effective.IsZero() {
		return nil
	}
	if info, _ := t.Info(); !info.Matures || r.Debit || r.ExplainBalance {
		return Errorf(KindInvalid, ReasonInvalidEffectiveTime, "only grants and credit adjustments take an effective time")
	}
	m.Effective = Instant(r.Effective)
	if !r.Expire.IsZero() && !Instant(r.Expire).After(m.Effective) {
		return Errorf(KindInvalid, ReasonInvalidExpiry, "expire_time %s is not after effective_time %s: the points would expire before they are spendable",
			r.Expire.UTC().Format(time.RFC3339Nano), m.Effective.Format(time.RFC3339Nano))
	}
	m.EffectiveSpec = r.EffectiveSpec
	if m.EffectiveSpec == "" {
		m.EffectiveSpec = "at " + m.Effective.Format(time.RFC3339Nano)
	}
	return nil
}

// CheckExplains refuses an adjustment that explains the balance (see
// Mutation) unless it is exactly what the account's balance differs from
// the sum of its entries: the balance minus entriesSum. Anything else would
// leave an entry whose balance_after no fold of the entries gives, for good.
func CheckExplains(m Mutation, acct Account, entriesSum decimal.Decimal) error {
	off := acct.Balance.Sub(entriesSum)
	switch {
	case off.IsZero():
		return Errorf(KindFailedPrecondition, ReasonNothingToExplain,
			"the balance %s of user %q is the sum of its entries: there is nothing to explain", acct.Balance, m.UserID)
	case !m.Delta().Equal(off):
		direction := "a credit"
		if off.IsNegative() {
			direction = "a debit"
		}
		return Errorf(KindFailedPrecondition, ReasonNotTheDifference,
			"the balance %s of user %q differs from the sum of its entries (%s) by %s: an adjustment explaining it must be %s of %s",
			acct.Balance, m.UserID, entriesSum, off, direction, off.Abs())
	}
	return nil
}

// Result is what a mutation returns: its entry, the account after the call,
// and whether it is the original result of an earlier identical request.
type Result struct {
	Entry Entry
	// Balance and Held are the account's after everything the call wrote:
	// its entry and the expiration the ledger may write right after it in
	// the same transaction (a refund into an expired bucket, or held points
	// of an expired bucket released, expire at once). Entry.BalanceAfter
	// stays the entry's own, so an answer can differ from it. A replay
	// answers the same: the account after the last entry the call wrote.
	Balance  decimal.Decimal
	Held     decimal.Decimal
	Pending  decimal.Decimal
	Replayed bool
	// Hold is the hold a hold, a capture or a void made or resolved, as it
	// is after it; a replay answers the hold as it is now.
	Hold Hold
}

// Delta is the signed amount of the mutation's entry: the change to the
// balance, or, for an adjustment that explains the balance, to the fold.
func (m Mutation) Delta() decimal.Decimal {
	info, _ := m.Type.Info()
	if info.NoAmount {
		return decimal.Zero
	}
	if !info.Credit || m.Debit {
		return m.Amount.Neg()
	}
	return m.Amount
}

// Spends says whether the mutation takes points from what is available (a
// debit, or a hold), so that what is available must cover it.
func (m Mutation) Spends() bool {
	info, _ := m.Type.Info()
	return info.Spends && !m.ExplainBalance && (m.Type != EntryAdjustment || m.Debit)
}

// SpendsWhere says whether the mutation is a spend at a merchant and in a
// category (either may be none): a purchase or a hold, which draws only
// eligible points (kind.go).
func (m Mutation) SpendsWhere() bool { return m.Type == EntryPurchase || m.Type == EntryHold }

// Hash identifies the request's content, so that a retry of the same request
// can be told from another request that reuses its request_id. Every field is
// length-prefixed and metadata is sorted, so the encoding is unambiguous.
func (m Mutation) Hash() string {
	// The fields are gathered in a buffer on the stack, then hashed at
	// once: a hash.Hash and each field's bytes were allocations of every
	// request's (issue 37).
	var buf [512]byte
	b := buf[:0]
	field := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(string(m.Type))
	field(m.UserID)
	field(m.RequestID)
	field(FormatAmount(m.Amount))
	field(m.OrderID)
	field(m.PurchaseRequestID)
	if m.HoldRequestID != "" { // only then, as with the expiry below
		field("hold")
		field(m.HoldRequestID)
	}
	if m.ExpireSpec != "" { // only then: the hashes of earlier requests stay as recorded
		field("expire")
		field(m.ExpireSpec)
	}
	if m.EffectiveSpec != "" {
		field("effective")
		field(m.EffectiveSpec)
	}
	if m.Type == EntryReversal {
		field("grant")
		field(m.GrantRequestID)
		field(m.Reason)
	}
	if m.BudgetID != "" { // only then, as with the expiry above
		field("budget")
		field(m.BudgetID)
	}
	if m.Kind != "" { // only then: a standard credit hashes as before kinds
		field("kind")
		field(m.Kind)
	}
	if m.MerchantID != "" || m.Category != "" {
		field("where")
		field(m.MerchantID)
		field(m.Category)
	}
	if m.Type == EntryAdjustment {
		field(fmt.Sprint(m.Debit, m.ExplainBalance))
		field(m.Reason)
		field(m.ExpectedBalance.String())
	}
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field(k)
		field(m.Metadata[k])
	}
	sum := sha256.Sum256(b)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:])
}

// ValidateUserID checks a user id: 1 to MaxIDLength characters from the id
// alphabet.
func ValidateUserID(id string) error {
	return validateID("user_id", ReasonInvalidUserID, id)
}

func validateID(field, reason, id string) error {
	if id == "" {
		return Errorf(KindInvalid, reason, "%s is required", field)
	}
	if len(id) > MaxIDLength {
		return Errorf(KindInvalid, reason, "%s is longer than %d characters", field, MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		if !isIDByte(id[i]) {
			return Errorf(KindInvalid, reason, "%s %q: only %s are allowed", field, truncate(id, 40), idAlphabetComment)
		}
	}
	return nil
}

func isIDByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '@', c == '+', c == '-':
		return true
	}
	return false
}

func validateOrderID(id string) error {
	if len(id) > MaxOrderIDBytes {
		return Errorf(KindInvalid, ReasonInvalidOrderID, "order_id is longer than %d bytes", MaxOrderIDBytes)
	}
	if !printable(id) {
		return Errorf(KindInvalid, ReasonInvalidOrderID, "order_id must be printable UTF-8")
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataKeys {
		return Errorf(KindInvalid, ReasonInvalidMetadata, "metadata has %d keys, at most %d are allowed", len(md), MaxMetadataKeys)
	}
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxMetadataKey {
			return Errorf(KindInvalid, ReasonInvalidMetadata, "metadata keys must be 1 to %d bytes", MaxMetadataKey)
		}
		for i := 0; i < len(k); i++ {
			if !isIDByte(k[i]) {
				return Errorf(KindInvalid, ReasonInvalidMetadata, "metadata key %q: only %s are allowed", truncate(k, 40), idAlphabetComment)
			}
		}
		if len(v) > MaxMetadataValue || !printable(v) {
			return Errorf(KindInvalid, ReasonInvalidMetadata, "metadata value of %q must be printable UTF-8 of at most %d bytes", k, MaxMetadataValue)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataTotal {
		return Errorf(KindInvalid, ReasonInvalidMetadata, "metadata is %d bytes, at most %d are allowed", total, MaxMetadataTotal)
	}
	return nil
}

// CheckStatusChange validates a request to move user's account to status:
// a user id, ACTIVE or FROZEN, and a reason (which may be empty) of
// printable text of at most MaxReasonBytes. Every store checks a status
// change with it before reading the account.
func CheckStatusChange(user string, status Status, reason string) error {
	if err := ValidateUserID(user); err != nil {
		return err
	}
	if status != StatusActive && status != StatusFrozen {
		return Errorf(KindInvalid, ReasonInvalidStatus, "status must be ACTIVE or FROZEN")
	}
	if len(reason) > MaxReasonBytes || !printable(reason) {
		return Errorf(KindInvalid, ReasonInvalidStatus, "reason must be printable text of at most %d bytes", MaxReasonBytes)
	}
	return nil
}

// printable says whether s is valid UTF-8 of printable characters, as the
// reasons, order ids and metadata the ledger stores must be.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
