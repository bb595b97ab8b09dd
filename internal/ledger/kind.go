package ledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Point kinds: a program-wide rule for points of one kind, where they may
// be spent and in what order. A bucket is keyed by (kind, expire_time).
//
// The zero kind, "", is StandardKind: a credit that names no kind, and
// everything written before kinds existed, is standard. Stores write no
// kind attribute for it, so an item from before kinds (no kind attribute)
// reads as standard, with no migration; and the items of a program that
// uses no other kind stay as small as they were. The API answers
// "standard" for it (KindName).
//
// A spend (a purchase, a hold) says where it is made: a merchant and a
// category, each optional. A bucket is eligible when its kind's Merchants
// is empty or holds the merchant, its Categories is empty or holds the
// category, and its ExcludedCategories does not hold the category; a spend
// with no merchant (no category) may only spend kinds without a merchant
// (category) list. Eligible buckets are spent lower Priority first, then
// soonest expiry (never-expiring last), then kind id (SpendingOrder).
//
// Decide takes the program's kinds as a fact (Facts.Kinds), a snapshot the
// store supplies, so that deciding stays pure: the store makes sure that
// the snapshot knows every kind the account and the mutation name
// (Kinds.Missing), reading the kinds again before it refuses a kind it does
// not know.

// StandardKind is the kind that always exists: priority 50, no
// restrictions. Its id inside the domain is "" (see above).
const StandardKind = "standard"

// Kind limits.
const (
	DefaultKindPriority = 50
	MaxKindPriority     = 100
	MaxKindIDLength     = 64
	MaxKindDescription  = 512
	MaxKindListLength   = 100 // merchants, categories, excluded categories: each
	MaxWhereLength      = 64  // a merchant_id or a category
	DefaultMaxKinds     = 100
	// MaxKindRefresh bounds how long an instance may decide with a kind's
	// rules after they changed: a store's cache of the kinds refreshes at
	// least this often (see docs/design.md).
	MaxKindRefresh        = time.Minute
	ReasonKindNotFound    = "KIND_NOT_FOUND"
	ReasonTooManyKinds    = "TOO_MANY_KINDS"
	ReasonKindExists      = "KIND_EXISTS"
	ReasonInvalidKind     = "INVALID_KIND"
	ReasonInvalidMerchant = "INVALID_MERCHANT_ID"
	ReasonInvalidCategory = "INVALID_CATEGORY"
	// MetadataSpendable is the ErrorInfo metadata key of an
	// INSUFFICIENT_BALANCE refusal of a spend: what it could have spent.
	MetadataSpendable = "spendable"
)

// PointKind is a kind of point and its rules.
type PointKind struct {
	ID                 string // 1-64 of [a-z0-9_-]; "" inside the domain is StandardKind
	Description        string
	Priority           int // 0-100, lower spent first
	Merchants          []string
	Categories         []string
	ExcludedCategories []string
	CreateTime         time.Time
	UpdateTime         time.Time
}

// Standard is the built-in kind.
var Standard = PointKind{ID: "", Description: "standard points", Priority: DefaultKindPriority}

// KindName is the name the API gives kind k: StandardKind for "".
func KindName(k string) string {
	if k == "" {
		return StandardKind
	}
	return k
}

// KindID is the domain's id of a kind named name on the wire: "" for
// StandardKind (and for none).
func KindID(name string) string {
	if name == StandardKind {
		return ""
	}
	return name
}

// ValidateKindID checks a kind's name: 1 to 64 of [a-z0-9_-].
func ValidateKindID(name string) error {
	if name == "" || len(name) > MaxKindIDLength {
		return Errorf(KindInvalid, ReasonInvalidKind, "kind_id must be 1 to %d characters", MaxKindIDLength)
	}
	for i := 0; i < len(name); i++ {
		if !isKindByte(name[i]) {
			return Errorf(KindInvalid, ReasonInvalidKind, "kind_id %q: only a-z, 0-9, _ and - are allowed", truncate(name, 40))
		}
	}
	return nil
}

func isKindByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// validateKindOf checks the kind a credit names (on the wire: "" or
// "standard" is standard) and returns its domain id.
func validateKindOf(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	if err := ValidateKindID(name); err != nil {
		return "", err
	}
	return KindID(name), nil
}

// validateWhere checks a spend's merchant_id or category: empty, or 1 to
// 64 printable characters.
func validateWhere(field, reason, v string) error {
	if v == "" {
		return nil
	}
	if utf8.RuneCountInString(v) > MaxWhereLength || !printable(v) {
		return Errorf(KindInvalid, reason, "%s must be printable text of 1 to %d characters", field, MaxWhereLength)
	}
	return nil
}

// Eligible says whether points of kind k may be spent by a spend at
// merchant in category (either may be "": none said).
func (k PointKind) Eligible(merchant, category string) bool {
	if len(k.Merchants) > 0 && (merchant == "" || !slices.Contains(k.Merchants, merchant)) {
		return false
	}
	if len(k.Categories) > 0 && (category == "" || !slices.Contains(k.Categories, category)) {
		return false
	}
	return category == "" || !slices.Contains(k.ExcludedCategories, category)
}

// KindChange is a validated request to create or update a kind.
type KindChange struct {
	RequestID string
	Kind      PointKind // without times
}

// KindRequest is a kind's creation or update as it arrives.
type KindRequest struct {
	RequestID          string
	KindID             string
	Description        string
	Priority           *int32 // nil: DefaultKindPriority
	Merchants          []string
	Categories         []string
	ExcludedCategories []string
}

// NewKindChange validates r.
func NewKindChange(r KindRequest) (KindChange, error) {
	if err := validateID("request_id", ReasonInvalidRequestID, r.RequestID); err != nil {
		return KindChange{}, err
	}
	if err := ValidateKindID(r.KindID); err != nil {
		return KindChange{}, err
	}
	if r.KindID == StandardKind {
		return KindChange{}, Errorf(KindInvalid, ReasonInvalidKind, "%q is built in (priority %d, no restrictions): it cannot be created or changed", StandardKind, DefaultKindPriority)
	}
	if len(r.Description) > MaxKindDescription || !printable(r.Description) {
		return KindChange{}, Errorf(KindInvalid, ReasonInvalidKind, "description must be printable text of at most %d bytes", MaxKindDescription)
	}
	k := PointKind{ID: r.KindID, Description: r.Description, Priority: DefaultKindPriority}
	if r.Priority != nil {
		if *r.Priority < 0 || *r.Priority > MaxKindPriority {
			return KindChange{}, Errorf(KindInvalid, ReasonInvalidKind, "priority must be 0 to %d", MaxKindPriority)
		}
		k.Priority = int(*r.Priority)
	}
	var err error
	if k.Merchants, err = whereList("merchants", ReasonInvalidMerchant, r.Merchants); err != nil {
		return KindChange{}, err
	}
	if k.Categories, err = whereList("categories", ReasonInvalidCategory, r.Categories); err != nil {
		return KindChange{}, err
	}
	if k.ExcludedCategories, err = whereList("excluded_categories", ReasonInvalidCategory, r.ExcludedCategories); err != nil {
		return KindChange{}, err
	}
	return KindChange{RequestID: r.RequestID, Kind: k}, nil
}

// whereList checks a kind's list of merchants or categories, and sorts it
// with no value twice, so that equal rules compare and hash equal.
func whereList(field, reason string, vs []string) ([]string, error) {
	if len(vs) > MaxKindListLength {
		return nil, Errorf(KindInvalid, reason, "%s has %d values, at most %d are allowed", field, len(vs), MaxKindListLength)
	}
	for _, v := range vs {
		if v == "" {
			return nil, Errorf(KindInvalid, reason, "%s holds an empty value", field)
		}
		if err := validateWhere(field, reason, v); err != nil {
			return nil, err
		}
	}
	if len(vs) == 0 {
		return nil, nil
	}
	return slices.Compact(slices.Sorted(slices.Values(vs))), nil
}

// Hash identifies the change's content, for its request_id's record.
func (c KindChange) Hash() string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(c.RequestID)
	field(c.Kind.ID)
	field(c.Kind.Description)
	field(strconv.Itoa(c.Kind.Priority))
	for _, l := range [][]string{c.Kind.Merchants, c.Kind.Categories, c.Kind.ExcludedCategories} {
		field(strconv.Itoa(len(l)))
		for _, v := range l {
			field(v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SameRules says whether k and o are the same kind with the same rules and
// description (times aside).
func (k PointKind) SameRules(o PointKind) bool {
	return k.ID == o.ID && k.Description == o.Description && k.Priority == o.Priority &&
		slices.Equal(k.Merchants, o.Merchants) && slices.Equal(k.Categories, o.Categories) &&
		slices.Equal(k.ExcludedCategories, o.ExcludedCategories)
}

// PointKindNotFound is the refusal of a kind that does not exist.
func PointKindNotFound(name string) *Error {
	return Errorf(KindNotFound, ReasonKindNotFound, "there is no point kind %q", KindName(name))
}

// TooManyKinds is the refusal of a kind beyond the program's bound.
func TooManyKinds(max int) *Error {
	return Errorf(KindFailedPrecondition, ReasonTooManyKinds, "the program has %d point kinds, as many as allowed", max)
}

// Kinds is a snapshot of the program's kinds by id, as Decide takes them:
// Standard is always in it, whether the map holds it or not.
type Kinds map[string]PointKind

// NewKinds is the snapshot of ks.
func NewKinds(ks ...PointKind) Kinds {
	out := make(Kinds, len(ks))
	for _, k := range ks {
		out[k.ID] = k
	}
	return out
}

// Get returns kind id; "" (StandardKind) always exists.
func (ks Kinds) Get(id string) (PointKind, bool) {
	if id == "" {
		return Standard, true
	}
	k, ok := ks[id]
	return k, ok
}

// priority of kind id: an unknown kind's is the default.
func (ks Kinds) priority(id string) int {
	if k, ok := ks.Get(id); ok {
		return k.Priority
	}
	return DefaultKindPriority
}

// Missing is the kinds that acct (its buckets, holds and pending lots) and
// m name that ks does not know: a store that finds some reads the kinds
// again before deciding, so that a kind created on another instance is
// known, and an unknown one refused only once it is read not to exist.
func (ks Kinds) Missing(acct Account, m Mutation) []string {
	var out []string
	add := func(id string) {
		if _, ok := ks.Get(id); !ok && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	add(m.Kind)
	for _, b := range acct.Buckets {
		add(b.Kind)
	}
	for _, l := range acct.PendingLots {
		add(l.Kind)
	}
	return out
}

// SpendingOrder sorts buckets as a spend draws them: lower priority
// first, then soonest expiry (never last), then kind id.
func (ks Kinds) SpendingOrder(bs []Bucket) []Bucket {
	slices.SortStableFunc(bs, func(a, b Bucket) int {
		return cmp.Or(cmp.Compare(ks.priority(a.Kind), ks.priority(b.Kind)), before(a.Expire, b.Expire),
			cmp.Compare(KindName(a.Kind), KindName(b.Kind)))
	})
	return bs
}

// Eligible is what of bs a spend at merchant in category may draw, in
// spending order; buckets of a kind ks does not know are not.
func (ks Kinds) Eligible(bs []Bucket, merchant, category string) []Bucket {
	var out []Bucket
	for _, b := range bs {
		if k, ok := ks.Get(b.Kind); ok && k.Eligible(merchant, category) {
			out = append(out, b)
		}
	}
	return ks.SpendingOrder(out)
}

// ofKind is the buckets of kind id, soonest expiry first.
func ofKind(bs []Bucket, id string) []Bucket {
	var out []Bucket
	for _, b := range bs {
		if b.Kind == id {
			out = append(out, b)
		}
	}
	return out
}

// bucketSum is the total of bs.
func bucketSum(bs []Bucket) decimal.Decimal {
	t := decimal.Zero
	for _, b := range bs {
		t = t.Add(b.Amount)
	}
	return t
}

// withUnbucketed is the account with what its buckets and holds leave of
// its balance (an account folded from entries written before buckets
// existed) in the standard never-expiring bucket, where such points are.
func (a Account) withUnbucketed() Account {
	rest := a.Balance.Sub(a.Held).Sub(bucketSum(a.Buckets))
	if !rest.IsPositive() {
		return a
	}
	a.Buckets = credit(a.Buckets, Draw{Amount: rest})
	return a
}

// KindBalance is what an account holds of one kind.
type KindBalance struct {
	Kind      string // "" is standard
	Balance   decimal.Decimal
	Available decimal.Decimal
	Held      decimal.Decimal
	Pending   decimal.Decimal
}

// KindBalances is what acct holds of each kind at t (see At): each kind it
// holds or has pending, in spending order (priority, then kind id).
func (a Account) KindBalances(t time.Time, ks Kinds) []KindBalance {
	at := a.At(t)
	by := map[string]*KindBalance{}
	get := func(id string) *KindBalance {
		if b, ok := by[id]; ok {
			return b
		}
		b := &KindBalance{Kind: id}
		by[id] = b
		return b
	}
	for _, b := range at.Buckets {
		kb := get(b.Kind)
		kb.Available = kb.Available.Add(b.Amount)
	}
	for _, h := range at.Holds {
		for _, d := range h.Draws {
			kb := get(d.Kind)
			kb.Held = kb.Held.Add(d.Amount)
		}
	}
	for _, l := range at.PendingLots {
		kb := get(l.Kind)
		kb.Pending = kb.Pending.Add(l.Amount)
	}
	out := make([]KindBalance, 0, len(by))
	for _, kb := range by {
		kb.Balance = kb.Available.Add(kb.Held)
		out = append(out, *kb)
	}
	slices.SortFunc(out, func(x, y KindBalance) int {
		return cmp.Or(cmp.Compare(ks.priority(x.Kind), ks.priority(y.Kind)), cmp.Compare(KindName(x.Kind), KindName(y.Kind)))
	})
	return out
}

// SpendableAt is what a spend at merchant in category could draw of acct
// at t: its eligible, unheld points.
func (a Account) SpendableAt(t time.Time, ks Kinds, merchant, category string) decimal.Decimal {
	return bucketSum(ks.Eligible(a.At(t).Buckets, merchant, category))
}

// insufficient is the refusal of a spend at merchant in category that its
// eligible points (spendable) do not cover.
func insufficient(m Mutation, spendable decimal.Decimal) *Error {
	e := Errorf(KindFailedPrecondition, ReasonInsufficientBalance,
		"user %q can spend %s %s, which does not cover %s", m.UserID, spendable, whereText(m.MerchantID, m.Category), m.Amount)
	e.Metadata = map[string]string{MetadataSpendable: spendable.String()}
	return e
}

func whereText(merchant, category string) string {
	m, c := "no merchant", "no category"
	if merchant != "" {
		m = fmt.Sprintf("merchant %q", merchant)
	}
	if category != "" {
		c = fmt.Sprintf("category %q", category)
	}
	return "at " + m + " in " + c
}

// PointKinds keeps the program's kinds (each store has one).
type PointKinds interface {
	// CreatePointKind creates a kind; the same request again is Replayed;
	// a kind that exists: KindAlreadyExists KIND_EXISTS; beyond the bound:
	// TOO_MANY_KINDS.
	CreatePointKind(ctx context.Context, c KindChange) (PointKind, bool, error)
	// UpdatePointKind changes an existing kind's rules (KIND_NOT_FOUND
	// if none); the same request again is Replayed.
	UpdatePointKind(ctx context.Context, c KindChange) (PointKind, bool, error)
	// GetPointKind reads one kind, consistently; "standard" is built in.
	GetPointKind(ctx context.Context, id string) (PointKind, error)
	// ListPointKinds is every kind (standard first, then by id),
	// consistently.
	ListPointKinds(ctx context.Context) ([]PointKind, error)
}
