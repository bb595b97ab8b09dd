// Package ddbproxy is an HTTP proxy in front of DynamoDB Local that makes it
// behave more like the real service where it matters for a hot user:
//
//   - every call takes Latency longer (the network and the service's own
//     time, which the in-process emulator does not have);
//   - a TransactWriteItems is cancelled with TransactionConflict when another
//     transaction on one of its items is still in flight, as DynamoDB does;
//   - a TransactWriteItems with two actions on one item is refused with a
//     ValidationException, as DynamoDB does (the emulator carries it out);
//   - with Faults, a share of the calls meets a latency spike or a closed
//     connection, and a share of the transactions is carried out while its
//     answer is lost or comes late: the unknown outcomes a ledger must
//     survive without losing or repeating a point;
//   - with Limits, each partition key (the PK attribute) of each table takes
//     at most DynamoDB's 1,000 write units and 3,000 read units a second,
//     times Limits.PartitionScale, and a request over it fails as it does
//     on an on-demand table: a ThrottlingException (reason
//     TableWriteKeyRangeThroughputExceeded or TableReadKeyRangeThroughputExceeded),
//     and in a transaction a TransactionCanceledException with ThrottlingError
//     for the items on a partition over its limit and None for the others.
//
// Units are charged by DynamoDB's rules: a write 1 unit per started KB of
// the item, an update at the larger of the item before and after, a
// transactional write twice that for each item; a strongly consistent read
// 1 unit per started 4 KB, eventually consistent half, transactional twice;
// a Query the sum of its items' sizes rounded up to 4 KB; a ConditionCheck
// in a transaction as a transactional write of the item's size (an
// assumption: the documentation we read does not say). A write is charged
// before it is forwarded (a failed condition costs as much), a read by its
// answer. To know an item's size before an update, a delete or a condition
// check, the proxy reads the item through the emulator first, and after an
// update again (see writeCost: an update is admitted on an estimate of its
// size after, and charged the exact larger size once it has gone through).
// A request it cannot price (a table that is not there) goes to the
// emulator uncharged, for DynamoDB's own answer, and is counted
// (Stats.Unpriced).
//
// Not modelled: burst capacity (a partition's bucket holds one second of
// units, not DynamoDB's 300 s of unused capacity; a request costing more
// than a second's units passes when the bucket is full and leaves it in
// debt), adaptive capacity and partition splits (a partition key is one
// partition forever, as a hot user on DynamoDB is), table and account
// limits, the partial answers of a BatchWriteItem or BatchGetItem (the
// whole batch is refused), Scans (not limited), and index writes (the tables
// have no index).
//
// ledgerd talks to it through its ordinary endpoint setting. Calls other
// than TransactWriteItems (reads, streams) are only delayed (and faulted),
// and limited with Limits.
package ddbproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Proxy.
type Options struct {
	Target  string        // the emulator's URL, e.g. http://127.0.0.1:8000
	Latency time.Duration // added to every call
	Faults  Faults
	Limits  Limits // DynamoDB's per-partition throughput; zero: none
}

// Faults are injected into a share of the calls, picked at random: what a
// network and a service under stress do to a client.
type Faults struct {
	Seed uint64 // of the random choices

	Spike    float64       // share of calls delayed by up to SpikeMax more
	SpikeMax time.Duration // (a latency spike)
	Reset    float64       // share of calls whose connection is closed before they reach DynamoDB
	// Share of TransactWriteItems that DynamoDB carries out but whose answer
	// never arrives: the connection is closed instead (an unknown outcome).
	LoseAnswer float64
	// Share of TransactWriteItems answered LateBy after DynamoDB carried them
	// out: past the deadline of a caller waiting on them.
	LateAnswer float64
	LateBy     time.Duration
}

// FaultStats count the faults injected.
type FaultStats struct {
	Spikes      int64 `json:"spikes"`
	Resets      int64 `json:"resets"`
	LostAnswers int64 `json:"lost_answers"`
	LateAnswers int64 `json:"late_answers"`
}

// Total is the number of faults injected.
func (f FaultStats) Total() int64 { return f.Spikes + f.Resets + f.LostAnswers + f.LateAnswers }

// Proxy is a running proxy.
type Proxy struct {
	URL string // where to point the DynamoDB client

	o        Options
	srv      *http.Server
	client   *http.Client
	mu       sync.Mutex
	inflight map[string]int // item key -> transactions in flight on it

	rng                            *rand.Rand // under mu
	faults                         FaultStats // under mu
	calls, transactions, conflicts atomic.Int64
	itemWrites                     map[string]int64             // by table, under mu
	ops                            map[string]OpStats           // by operation, under mu
	partitions                     map[string]*partitionBuckets // by "table|partition key", under mu
	units                          map[string]Units             // charged, by table, under mu
	throttles                      map[string]map[string]int64  // by table and key kind, under mu

	twoActionRefusals atomic.Int64
	unpriced          atomic.Int64
}

// OpStats count the calls of one DynamoDB operation and the time DynamoDB
// took to answer them (the latency the proxy adds is not in it).
type OpStats struct {
	Calls int64         `json:"calls"`
	Time  time.Duration `json:"time_ns"`
}

// Start listens on a free port of 127.0.0.1 and proxies to o.Target.
func Start(o Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{
		URL:        "http://" + ln.Addr().String(),
		o:          o,
		client:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}},
		inflight:   map[string]int{},
		itemWrites: map[string]int64{},
		ops:        map[string]OpStats{},
		partitions: map[string]*partitionBuckets{},
		units:      map[string]Units{},
		throttles:  map[string]map[string]int64{},
		rng:        rand.New(rand.NewPCG(o.Faults.Seed, o.Faults.Seed^0x5eed)),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// Stats counts what the proxy saw.
type Stats struct {
	Calls        int64              `json:"calls"`
	Transactions int64              `json:"transactions"`
	Conflicts    int64              `json:"transaction_conflicts"` // cancelled by the proxy
	ItemWrites   map[string]int64   `json:"item_writes"`           // by table: items of the transactions that went through
	Ops          map[string]OpStats `json:"ops"`                   // by operation (GetItem, TransactWriteItems, ...)
	Faults       FaultStats         `json:"faults"`

	// Transactions refused with a ValidationException for two actions on
	// one item: a correct client sends none, so more than 0 is its bug.
	TwoActionRefusals int64 `json:"two_action_refusals"`

	// With Limits: the capacity units charged, by table, and the requests
	// refused for a partition over its limit, by table and key kind (the
	// partition key's prefix before '#', such as ACCT).
	Units     map[string]Units            `json:"units,omitempty"`
	Throttles map[string]map[string]int64 `json:"throttles,omitempty"`
	// Unpriced: requests the limits could not price (a body the proxy
	// cannot read, a table that is not there), forwarded uncharged for
	// DynamoDB's own answer.
	Unpriced int64 `json:"unpriced,omitempty"`
}

// Throttled is the number of requests refused for a partition's limit.
func (s Stats) Throttled() int64 {
	var n int64
	for _, byKind := range s.Throttles {
		for _, k := range byKind {
			n += k
		}
	}
	return n
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	writes := make(map[string]int64, len(p.itemWrites))
	for t, n := range p.itemWrites {
		writes[t] = n
	}
	ops := make(map[string]OpStats, len(p.ops))
	for o, st := range p.ops {
		ops[o] = st
	}
	units := make(map[string]Units, len(p.units))
	for t, u := range p.units {
		units[t] = u
	}
	throttles := make(map[string]map[string]int64, len(p.throttles))
	for t, byKind := range p.throttles {
		throttles[t] = make(map[string]int64, len(byKind))
		for k, n := range byKind {
			throttles[t][k] = n
		}
	}
	return Stats{Calls: p.calls.Load(), Transactions: p.transactions.Load(), Conflicts: p.conflicts.Load(), ItemWrites: writes, Ops: ops, Faults: p.faults,
		TwoActionRefusals: p.twoActionRefusals.Load(), Units: units, Throttles: throttles, Unpriced: p.unpriced.Load()}
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.calls.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f := p.o.Faults
	delay := p.o.Latency
	if p.roll(f.Spike, &p.faults.Spikes) {
		delay += time.Duration(p.float() * float64(f.SpikeMax))
	}
	time.Sleep(delay)
	if p.roll(f.Reset, &p.faults.Resets) {
		hangUp(w)
		return
	}
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	if op != "TransactWriteItems" {
		if p.o.Limits.on() {
			p.serveLimited(w, r, op, body)
			return
		}
		p.forward(w, r, body, fate{}, nil)
		return
	}
	p.transactions.Add(1)
	keys, err := transactionKeys(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if twice(keys) {
		p.twoActionRefusals.Add(1)
		writeValidation(w, "Transaction request cannot include multiple operations on one item")
		return
	}
	var seen func([]byte)
	if p.o.Limits.on() {
		cs, gs, n, err := p.transactionCharges(r.Context(), r.Header, body)
		if err != nil {
			p.unpriced.Add(1) // forwarded uncharged, as serveLimited does
			cs, gs = nil, nil
		}
		if over := p.admitWrites(cs); over != nil {
			writeCanceled(w, n, "ThrottlingError", "Throughput exceeds the current capacity for one or more items", itemsOf(over))
			return
		}
		if len(gs) > 0 {
			seen = func([]byte) { p.correct(r.Context(), r.Header, gs) }
		}
	}
	if i, ok := p.enter(keys); !ok {
		p.conflicts.Add(1)
		writeConflict(w, len(keys), i)
		return
	}
	defer p.leave(keys)
	var end fate
	switch {
	case p.roll(f.LoseAnswer, &p.faults.LostAnswers):
		end.lose = true
	case p.roll(f.LateAnswer, &p.faults.LateAnswers):
		end.late = f.LateBy
	}
	p.forward(w, r, body, end, seen)
}

// fate is what happens to an answer on its way back.
type fate struct {
	lose bool          // never delivered: the connection is closed
	late time.Duration // delivered this much later
}

// roll says whether to inject a fault of probability prob, and counts it.
func (p *Proxy) roll(prob float64, n *int64) bool {
	if prob <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rng.Float64() >= prob {
		return false
	}
	*n++
	return true
}

func (p *Proxy) float() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64()
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if h, ok := w.(http.Hijacker); ok {
		if conn, _, err := h.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // the server closes the connection
}

// enter marks keys in flight, or returns the index of one already in flight.
func (p *Proxy) enter(keys []string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range keys {
		if p.inflight[k] > 0 {
			return i, false
		}
	}
	for _, k := range keys {
		p.inflight[k]++
		table, _, _ := strings.Cut(k, "|")
		p.itemWrites[table]++
	}
	return 0, true
}

func (p *Proxy) leave(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		if p.inflight[k]--; p.inflight[k] <= 0 {
			delete(p.inflight, k)
		}
	}
}

// forward sends the call to the emulator and its answer back, as end
// says; seen, if any, reads a successful answer first.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, end fate, seen func(answer []byte)) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.o.Target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	start := time.Now()
	res, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer p.count(r.Header.Get("X-Amz-Target"), start)
	defer res.Body.Close()
	if end.lose || end.late > 0 || seen != nil {
		answer, err := io.ReadAll(res.Body) // DynamoDB has carried it out
		if err == nil && seen != nil && res.StatusCode == http.StatusOK {
			seen(answer)
		}
		if err != nil || end.lose {
			hangUp(w)
			return
		}
		time.Sleep(end.late)
		res.Body = io.NopCloser(bytes.NewReader(answer))
	}
	for k, vs := range res.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

// count adds a call of target (e.g. DynamoDB_20120810.GetItem) that was
// sent at start and whose answer has been read.
func (p *Proxy) count(target string, start time.Time) {
	d := time.Since(start)
	_, op, _ := strings.Cut(target, ".")
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.ops[op]
	st.Calls++
	st.Time += d
	p.ops[op] = st
}

// transactionKeys lists "table|key" of every item of a TransactWriteItems
// request, in order.
func transactionKeys(body []byte) ([]string, error) {
	type op struct {
		TableName string                     `json:"TableName"`
		Key       map[string]json.RawMessage `json:"Key"`
		Item      map[string]json.RawMessage `json:"Item"`
	}
	var in struct {
		TransactItems []struct {
			Put, Update, Delete, ConditionCheck *op
		} `json:"TransactItems"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("proxy: TransactWriteItems body: %w", err)
	}
	keys := make([]string, 0, len(in.TransactItems))
	for _, it := range in.TransactItems {
		o := it.Put
		for _, x := range []*op{it.Update, it.Delete, it.ConditionCheck} {
			if o == nil {
				o = x
			}
		}
		if o == nil {
			return nil, fmt.Errorf("proxy: a transaction item with no operation")
		}
		key := o.Key
		if key == nil {
			key = o.Item // a Put names its key inside the item
		}
		keys = append(keys, o.TableName+"|"+string(key["PK"])+"|"+string(key["SK"]))
	}
	return keys, nil
}

// twice says whether a key appears more than once.
func twice(keys []string) bool {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// writeValidation answers as DynamoDB does to a request it refuses to run.
func writeValidation(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"__type":  "com.amazon.coral.validate#ValidationException",
		"message": msg,
	})
}

// writeConflict answers as DynamoDB does when a transaction meets another on
// item i: TransactionCanceledException, with TransactionConflict for it.
func writeConflict(w http.ResponseWriter, n, i int) {
	writeCanceled(w, n, "TransactionConflict", "Transaction is ongoing for the item", []int{i})
}

// writeCanceled answers a transaction of n items cancelled for code on
// items, with "None" for the others, as DynamoDB does.
func writeCanceled(w http.ResponseWriter, n int, code, msg string, items []int) {
	reasons := make([]map[string]string, n)
	codes := make([]string, n)
	for j := range reasons {
		codes[j] = "None"
		reasons[j] = map[string]string{"Code": codes[j]}
	}
	for _, j := range items {
		codes[j] = code
		reasons[j] = map[string]string{"Code": code, "Message": msg}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"__type":              "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		"Message":             "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
		"CancellationReasons": reasons,
	})
}
