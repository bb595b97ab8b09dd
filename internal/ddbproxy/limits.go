package ddbproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// DynamoDB's throughput limits of one partition, at scale 1.
const (
	partitionWriteUnits = 1000 // write units a second
	partitionReadUnits  = 3000 // read units a second
)

// partitionKey is the partition key attribute of every table the proxy
// limits (all of pointledger's tables, migrations/).
const partitionKey = "PK"

// Limits have the proxy enforce DynamoDB's per-partition throughput.
type Limits struct {
	// PartitionScale multiplies the rates of a partition: at 0.1 a
	// partition key takes 100 write units and 300 read units a second, so
	// that the partition is the bound and not the emulator's speed.
	// 0 turns the limits off.
	PartitionScale float64
	// Now is the clock of the token buckets; nil is time.Now. Tests drive
	// the buckets with their own clock rather than with the machine's speed.
	Now func() time.Time
}

func (l Limits) on() bool { return l.PartitionScale > 0 }

func (l Limits) now() time.Time {
	if l.Now == nil {
		return time.Now()
	}
	return l.Now()
}

// Units are the capacity units charged.
type Units struct {
	Write float64 `json:"write"`
	Read  float64 `json:"read"`
}

// bucket holds the units a partition may still consume: it fills at the
// partition's rate up to one second's worth (DynamoDB's 300 s of burst
// capacity is not modelled).
type bucket struct {
	units float64
	at    time.Time
}

func (b *bucket) fill(now time.Time, rate float64) {
	if b.at.IsZero() {
		b.units = rate
	} else if now.After(b.at) {
		b.units = math.Min(rate, b.units+rate*now.Sub(b.at).Seconds())
	}
	if now.After(b.at) {
		b.at = now
	}
}

// has says whether the bucket admits a request of cost units. A cost larger
// than a full bucket passes when the bucket is full and leaves it in debt,
// so that such requests still go through at the partition's rate.
func (b *bucket) has(cost, rate float64) bool { return b.units >= math.Min(cost, rate) }

type partitionBuckets struct{ write, read bucket }

// charge is what a request costs on one partition.
type charge struct {
	table string
	pk    string // the partition key value, in DynamoDB JSON
	units float64
	items []int // the request's items on this partition (transactions)
}

// keyKind is the partition key's prefix before '#' (ACCT of ACCT#alice):
// what kind of item is hot, without naming the user.
func keyKind(pk string) string {
	var v struct{ S string }
	if err := json.Unmarshal([]byte(pk), &v); err != nil || v.S == "" {
		return "other"
	}
	kind, _, ok := strings.Cut(v.S, "#")
	if !ok {
		return "other"
	}
	return kind
}

// partitionOf is the partition key value of an item or a key, compacted so
// that one value has one spelling.
func partitionOf(it item) (string, error) {
	raw, ok := it[partitionKey]
	if !ok {
		return "", fmt.Errorf("no %s attribute", partitionKey)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", fmt.Errorf("%s: %w", partitionKey, err)
	}
	return b.String(), nil
}

// admit charges writes to their partitions' buckets if every one of them
// has room, or charges nothing and returns the charges over the limit.
func (p *Proxy) admitWrites(cs []charge) (over []charge) {
	now := p.o.Limits.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	over = p.overLimit(cs, now, partitionWriteUnits, func(c charge) (*bucket, float64) { return &p.partition(c).write, c.units })
	if len(over) > 0 {
		return over
	}
	for _, c := range cs {
		p.spendWrite(c, c.units)
	}
	return nil
}

// admitReads says which partitions have no room for a read of at least
// least units: a read's cost is known only from its answer (chargeReads).
func (p *Proxy) admitReads(cs []charge, least float64) (over []charge) {
	now := p.o.Limits.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.overLimit(cs, now, partitionReadUnits, func(c charge) (*bucket, float64) { return &p.partition(c).read, least })
}

// overLimit is under mu: it fills, at units a second (scaled), the bucket
// of each charge that bucketOf names, and counts and returns the charges
// whose bucket has no room for the cost bucketOf gives.
func (p *Proxy) overLimit(cs []charge, now time.Time, units float64, bucketOf func(charge) (*bucket, float64)) (over []charge) {
	rate := units * p.o.Limits.PartitionScale
	for _, c := range cs {
		b, cost := bucketOf(c)
		b.fill(now, rate)
		if !b.has(cost, rate) {
			over = append(over, c)
		}
	}
	p.countThrottles(over)
	return over
}

// spendWrite is under mu: units off c's partition's write bucket, and
// onto its table's charged units.
func (p *Proxy) spendWrite(c charge, units float64) {
	p.partition(c).write.units -= units
	u := p.units[c.table]
	u.Write += units
	p.units[c.table] = u
}

// chargeReads takes what reads cost, once their answer has said it; the
// bucket may go into debt, which later reads wait out.
func (p *Proxy) chargeReads(cs []charge) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.partition(c).read.units -= c.units
		u := p.units[c.table]
		u.Read += c.units
		p.units[c.table] = u
	}
}

// partition is under mu.
func (p *Proxy) partition(c charge) *partitionBuckets {
	k := c.table + "|" + c.pk
	b, ok := p.partitions[k]
	if !ok {
		b = &partitionBuckets{}
		p.partitions[k] = b
	}
	return b
}

// countThrottles is under mu.
func (p *Proxy) countThrottles(over []charge) {
	for _, c := range over {
		byKind, ok := p.throttles[c.table]
		if !ok {
			byKind = map[string]int64{}
			p.throttles[c.table] = byKind
		}
		byKind[keyKind(c.pk)]++
	}
}

// merge adds c to the charge of its partition in cs, so that a request
// with several items on one partition is admitted or refused as a whole.
func merge(cs []charge, c charge) []charge {
	for i := range cs {
		if cs[i].table == c.table && cs[i].pk == c.pk {
			cs[i].units += c.units
			cs[i].items = append(cs[i].items, c.items...)
			return cs
		}
	}
	return append(cs, c)
}

// writeAction is one write of a request: a PutItem, UpdateItem,
// DeleteItem, BatchWriteItem request or an action of a TransactWriteItems.
type writeAction struct {
	TableName                 string `json:"TableName"`
	Key                       item   `json:"Key"`
	Item                      item   `json:"Item"`
	ExpressionAttributeValues item   `json:"ExpressionAttributeValues"`
}

type writeKind int

const (
	put writeKind = iota
	update
	remove // DeleteItem, and a ConditionCheck: both cost the item's size
)

// writeCost is the write units of action: for a Put the item it writes;
// for a Delete or a ConditionCheck the item as it is (read through the
// emulator); for an Update the larger of the item before (read) and after.
// The size after is known only once the update is carried out: the request
// is admitted on an estimate (the item before plus the values the update
// names, not their attribute names), and the returned grown, once the
// update has gone through, reads the item again and corrects the charge to
// the units of the larger of before and after. A Put that replaces a
// larger item is charged at the new item's size (pointledger's Puts create
// items).
func (p *Proxy) writeCost(ctx context.Context, h http.Header, a writeAction, kind writeKind) (charge, *grown, error) {
	key := a.Key
	if kind == put {
		key = a.Item
	}
	pk, err := partitionOf(key)
	if err != nil {
		return charge{}, nil, fmt.Errorf("%s key: %w", a.TableName, err)
	}
	c := charge{table: a.TableName, pk: pk}
	if kind == put {
		size, err := itemSize(a.Item)
		if err != nil {
			return charge{}, nil, err
		}
		c.units = writeUnits(size)
		return c, nil, nil
	}
	before, err := p.sizeOf(ctx, h, a.TableName, a.Key)
	if err != nil {
		return charge{}, nil, err
	}
	c.units = writeUnits(before)
	if kind != update {
		return c, nil, nil
	}
	after := before
	if after == 0 {
		if after, err = itemSize(a.Key); err != nil {
			return charge{}, nil, err
		}
	}
	added, err := itemSize(a.ExpressionAttributeValues)
	if err != nil {
		return charge{}, nil, err
	}
	for name := range a.ExpressionAttributeValues {
		added -= len(name) // a placeholder (":v") is not in the item
	}
	c.units = writeUnits(max(before, after+added))
	return c, &grown{charge: c, key: a.Key, before: before, factor: 1}, nil
}

// grown corrects an update's charge once it has gone through: from the
// estimate to the larger of the item's size before and after.
type grown struct {
	charge         // as admitted
	key    item    // the updated item's
	before int     // its size before
	factor float64 // 2 in a transaction
}

// correct reads the updated items again and charges the difference
// between what each cost and what was admitted (a refund if less).
func (p *Proxy) correct(ctx context.Context, h http.Header, gs []*grown) {
	for _, g := range gs {
		after, err := p.sizeOf(ctx, h, g.table, g.key)
		if err != nil {
			continue // the estimate stands
		}
		delta := g.factor*writeUnits(max(g.before, after)) - g.units
		p.mu.Lock()
		p.spendWrite(g.charge, delta)
		p.mu.Unlock()
	}
}

// sizeOf reads the item at key through the emulator (strongly consistent)
// and returns its size, 0 if there is none.
func (p *Proxy) sizeOf(ctx context.Context, h http.Header, table string, key item) (int, error) {
	body, err := json.Marshal(map[string]any{"TableName": table, "Key": key, "ConsistentRead": true})
	if err != nil {
		return 0, fmt.Errorf("size lookup: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.o.Target+"/", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("size lookup: %w", err)
	}
	req.Header = h.Clone() // DynamoDB Local takes any signature
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
	req.Header.Del("Content-Length")
	res, err := p.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("size lookup: %w", err)
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, fmt.Errorf("size lookup: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("size lookup: %s: %s", res.Status, answer)
	}
	var out struct{ Item item }
	if err := json.Unmarshal(answer, &out); err != nil {
		return 0, fmt.Errorf("size lookup: %w", err)
	}
	if out.Item == nil {
		return 0, nil
	}
	return itemSize(out.Item)
}

// transactionCharges are the write units of a TransactWriteItems: twice
// the units of each action, by partition.
func (p *Proxy) transactionCharges(ctx context.Context, h http.Header, body []byte) ([]charge, []*grown, int, error) {
	var in struct {
		TransactItems []struct {
			Put, Update, Delete, ConditionCheck *writeAction
		} `json:"TransactItems"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, 0, fmt.Errorf("TransactWriteItems body: %w", err)
	}
	var cs []charge
	var gs []*grown
	for i, it := range in.TransactItems {
		a, kind := it.Put, put
		switch {
		case it.Update != nil:
			a, kind = it.Update, update
		case it.Delete != nil:
			a, kind = it.Delete, remove
		case it.ConditionCheck != nil:
			a, kind = it.ConditionCheck, remove
		}
		if a == nil {
			return nil, nil, 0, fmt.Errorf("transaction item %d has no action", i)
		}
		c, g, err := p.writeCost(ctx, h, *a, kind)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("transaction item %d: %w", i, err)
		}
		c.units *= 2
		c.items = []int{i}
		cs = merge(cs, c)
		if g != nil {
			g.units, g.factor = c.units, 2
			gs = append(gs, g)
		}
	}
	return cs, gs, len(in.TransactItems), nil
}

// serveLimited carries out a call other than TransactWriteItems under the
// limits: writes are charged before they are forwarded, reads admitted if
// their partitions have room and charged by their answer.
func (p *Proxy) serveLimited(w http.ResponseWriter, r *http.Request, op string, body []byte) {
	// A request the proxy cannot price (a body it cannot read, a table
	// that is not there) goes to the emulator uncharged, for DynamoDB's own
	// answer to it.
	fail := func(error) {
		p.unpriced.Add(1)
		p.forward(w, r, body, fate{}, nil)
	}
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem":
		var a writeAction
		if err := json.Unmarshal(body, &a); err != nil {
			fail(err)
			return
		}
		kind := map[string]writeKind{"PutItem": put, "UpdateItem": update, "DeleteItem": remove}[op]
		c, g, err := p.writeCost(r.Context(), r.Header, a, kind)
		if err != nil {
			fail(err)
			return
		}
		if over := p.admitWrites([]charge{c}); over != nil {
			writeThrottling(w, "Write", over[0].table)
			return
		}
		if g != nil {
			p.forward(w, r, body, fate{}, func([]byte) { p.correct(r.Context(), r.Header, []*grown{g}) })
			return
		}
	case "BatchWriteItem":
		cs, err := batchWriteCharges(body)
		if err != nil {
			fail(err)
			return
		}
		if over := p.admitWrites(cs); over != nil {
			writeThrottling(w, "Write", over[0].table)
			return
		}
	case "GetItem", "Query", "BatchGetItem":
		cs, least, err := readRequest(op, body)
		if err != nil {
			fail(err)
			return
		}
		if over := p.admitReads(cs, least); over != nil {
			writeThrottling(w, "Read", over[0].table)
			return
		}
		p.forward(w, r, body, fate{}, func(answer []byte) {
			if got, err := readAnswer(op, body, answer); err == nil {
				p.chargeReads(got)
			}
		})
		return
	case "TransactGetItems":
		cs, n, err := transactGetRequest(body)
		if err != nil {
			fail(err)
			return
		}
		if over := p.admitReads(cs, 2); over != nil {
			writeCanceled(w, n, "ThrottlingError", "Throughput exceeds the current capacity for one or more items", itemsOf(over))
			return
		}
		p.forward(w, r, body, fate{}, func(answer []byte) {
			if got, err := transactGetAnswer(body, answer); err == nil {
				p.chargeReads(got)
			}
		})
		return
	}
	// Scans and the streams' calls span partitions: not limited.
	p.forward(w, r, body, fate{}, nil)
}

func itemsOf(cs []charge) []int {
	var items []int
	for _, c := range cs {
		items = append(items, c.items...)
	}
	return items
}

// batchWriteCharges are the write units of a BatchWriteItem: a Put the
// units of its item, a Delete 1 (not looked up: pointledger sends none).
func batchWriteCharges(body []byte) ([]charge, error) {
	var in struct {
		RequestItems map[string][]struct {
			PutRequest    *struct{ Item item }
			DeleteRequest *struct{ Key item }
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	var cs []charge
	for table, reqs := range in.RequestItems {
		for _, r := range reqs {
			key, units := item(nil), 1.0
			switch {
			case r.PutRequest != nil:
				key = r.PutRequest.Item
				size, err := itemSize(key)
				if err != nil {
					return nil, err
				}
				units = writeUnits(size)
			case r.DeleteRequest != nil:
				key = r.DeleteRequest.Key
			}
			pk, err := partitionOf(key)
			if err != nil {
				return nil, err
			}
			cs = merge(cs, charge{table: table, pk: pk, units: units})
		}
	}
	return cs, nil
}

// readRequest lists the partitions a read will charge and the least it
// costs on each: half a unit eventually consistent, 1 strongly.
func readRequest(op string, body []byte) ([]charge, float64, error) {
	var in struct {
		TableName                 string
		Key                       item
		ConsistentRead            bool
		KeyConditionExpression    string
		ExpressionAttributeNames  map[string]string
		ExpressionAttributeValues item
		RequestItems              map[string]struct {
			Keys           []item
			ConsistentRead bool
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, 0, err
	}
	least := 0.5
	if in.ConsistentRead {
		least = 1
	}
	switch op {
	case "GetItem":
		pk, err := partitionOf(in.Key)
		return []charge{{table: in.TableName, pk: pk}}, least, err
	case "Query":
		pk, err := queriedPartition(in.KeyConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
		return []charge{{table: in.TableName, pk: pk}}, least, err
	}
	var cs []charge
	least = 1
	for table, r := range in.RequestItems {
		if !r.ConsistentRead {
			least = 0.5
		}
		for _, k := range r.Keys {
			pk, err := partitionOf(k)
			if err != nil {
				return nil, 0, err
			}
			cs = merge(cs, charge{table: table, pk: pk})
		}
	}
	return cs, least, nil
}

var keyCondition = regexp.MustCompile(`(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)`)

// queriedPartition is the partition key value a Query's key condition
// names ("PK = :pk", or "#pk = :pk" with #pk naming PK).
func queriedPartition(cond string, names map[string]string, values item) (string, error) {
	for _, m := range keyCondition.FindAllStringSubmatch(cond, -1) {
		name := m[1]
		if n, ok := names[name]; ok {
			name = n
		}
		if name == partitionKey {
			return partitionOf(item{partitionKey: values[m[2]]})
		}
	}
	return "", fmt.Errorf("no %s = :value in key condition %q", partitionKey, cond)
}

// readAnswer charges a read by the items it returned: a GetItem 1 unit a
// started 4 KB of its item, a Query of the sum of its items, a
// BatchGetItem of each item; half of it eventually consistent.
func readAnswer(op string, request, answer []byte) ([]charge, error) {
	cs, least, err := readRequest(op, request)
	if err != nil {
		return nil, err
	}
	factor := least // 0.5 or 1, the unit's share
	var out struct {
		Item      item
		Items     []item
		Responses map[string][]item
	}
	if err := json.Unmarshal(answer, &out); err != nil {
		return nil, err
	}
	switch op {
	case "GetItem":
		size, err := itemSize(out.Item)
		if err != nil {
			return nil, err
		}
		cs[0].units = factor * readUnits(size)
		return cs, nil
	case "Query":
		sum := 0
		for _, it := range out.Items {
			size, err := itemSize(it)
			if err != nil {
				return nil, err
			}
			sum += size
		}
		cs[0].units = factor * readUnits(sum)
		return cs, nil
	}
	cs = cs[:0]
	for table, items := range out.Responses {
		for _, it := range items {
			size, err := itemSize(it)
			if err != nil {
				return nil, err
			}
			pk, err := partitionOf(it)
			if err != nil {
				return nil, err
			}
			cs = merge(cs, charge{table: table, pk: pk, units: factor * readUnits(size)})
		}
	}
	return cs, nil
}

type transactGet struct {
	TransactItems []struct {
		Get struct {
			TableName string
			Key       item
		}
	}
}

// transactGetRequest lists the partitions of a TransactGetItems.
func transactGetRequest(body []byte) ([]charge, int, error) {
	var in transactGet
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, 0, err
	}
	var cs []charge
	for i, it := range in.TransactItems {
		pk, err := partitionOf(it.Get.Key)
		if err != nil {
			return nil, 0, err
		}
		cs = merge(cs, charge{table: it.Get.TableName, pk: pk, items: []int{i}})
	}
	return cs, len(in.TransactItems), nil
}

// transactGetAnswer charges a TransactGetItems 2 units a started 4 KB of
// each item.
func transactGetAnswer(request, answer []byte) ([]charge, error) {
	var in transactGet
	if err := json.Unmarshal(request, &in); err != nil {
		return nil, err
	}
	var out struct{ Responses []struct{ Item item } }
	if err := json.Unmarshal(answer, &out); err != nil {
		return nil, err
	}
	var cs []charge
	for i, r := range out.Responses {
		if i >= len(in.TransactItems) {
			break
		}
		size, err := itemSize(r.Item)
		if err != nil {
			return nil, err
		}
		g := in.TransactItems[i].Get
		pk, err := partitionOf(g.Key)
		if err != nil {
			return nil, err
		}
		cs = merge(cs, charge{table: g.TableName, pk: pk, units: 2 * readUnits(size)})
	}
	return cs, nil
}

// writeThrottling answers as DynamoDB does to a request over a partition's
// limit on an on-demand table: ThrottlingException, with the reason (its
// member is throttlingReasons, lowercase, unlike in
// ProvisionedThroughputExceededException: so DynamoDB's model spells it).
func writeThrottling(w http.ResponseWriter, operation, table string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"__type":  "com.amazonaws.dynamodb.v20120810#ThrottlingException",
		"message": "Throughput exceeds the current capacity for one or more partition keys of your table",
		"throttlingReasons": []map[string]string{{
			"reason":   "Table" + operation + "KeyRangeThroughputExceeded",
			"resource": "arn:aws:dynamodb:local:000000000000:table/" + table,
		}},
	})
}
