package ddbproxy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// clock drives the proxy's token buckets: time moves only when a test says.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// limited starts a proxy with the limits at scale in front of env, and an
// SDK client through it that does not retry (the SDK would retry a
// ThrottlingException on its own; here every refusal is the test's to see).
func limited(t *testing.T, env *dynamotest.Env, scale float64) (*ddbproxy.Proxy, *dynamodb.Client, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
	p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Limits: ddbproxy.Limits{PartitionScale: scale, Now: c.Now}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	db := dynamodb.New(dynamolocal.NewClient(p.URL).Options(), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	return p, db, c
}

// sized is an item of exactly size bytes by DynamoDB's rules: the names
// PK, SK and d and their string values.
func sized(pk, sk string, size int) map[string]types.AttributeValue {
	pad := size - len("PK") - len(pk) - len("SK") - len(sk) - len("d")
	return map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: pk},
		"SK": &types.AttributeValueMemberS{Value: sk},
		"d":  &types.AttributeValueMemberS{Value: strings.Repeat("x", pad)},
	}
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: pk}, "SK": &types.AttributeValueMemberS{Value: sk}}
}

// charged runs f and returns the write and read units the proxy charged
// the ledger table for it.
func charged(t *testing.T, p *ddbproxy.Proxy, table string, f func() error) ddbproxy.Units {
	t.Helper()
	before := p.Stats().Units[table]
	if err := f(); err != nil {
		t.Fatal(err)
	}
	after := p.Stats().Units[table]
	return ddbproxy.Units{Write: after.Write - before.Write, Read: after.Read - before.Read}
}

// A write costs 1 unit per started KB of its item, twice in a transaction.
func TestWriteUnitsPerStartedKB(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, db, _ := limited(t, env, 1)
	ctx := context.Background()
	for _, tc := range []struct {
		size        int
		write, txn  float64
		description string
	}{
		{100, 1, 2, "a small item"},
		{1024, 1, 2, "exactly 1 KB"},
		{1025, 2, 4, "a byte over 1 KB"},
		{4096, 4, 8, "4 KB"},
		{4097, 5, 10, "a byte over 4 KB"},
	} {
		put := func() error {
			_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: sized("ACCT#w", "P", tc.size)})
			return err
		}
		if got := charged(t, p, env.Ledger, put); got.Write != tc.write {
			t.Errorf("PutItem of %s (%d B): %v write units, want %v", tc.description, tc.size, got.Write, tc.write)
		}
		txn := func() error {
			_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Put: &types.Put{TableName: &env.Ledger, Item: sized("ACCT#w", "T", tc.size)}},
			}})
			return err
		}
		if got := charged(t, p, env.Ledger, txn); got.Write != tc.txn {
			t.Errorf("a transaction putting %s (%d B): %v write units, want %v", tc.description, tc.size, got.Write, tc.txn)
		}
	}
	// A transaction of several items pays for each.
	three := func() error {
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: &env.Ledger, Item: sized("ACCT#w", "1", 1024)}},
			{Put: &types.Put{TableName: &env.Ledger, Item: sized("ACCT#w", "2", 1025)}},
			{Put: &types.Put{TableName: &env.Ledger, Item: sized("ACCT#v", "3", 3000)}},
		}})
		return err
	}
	if got := charged(t, p, env.Ledger, three); got.Write != 2*(1+2+3) {
		t.Errorf("a transaction of 1, 2 and 3 KB items: %v write units, want 12", got.Write)
	}
}

// An update is charged at the larger of the item before and after, also
// when only the attribute's name takes the item past a KB (which the
// proxy's estimate before the update does not count).
func TestUpdateChargedAtTheLargerSize(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, db, _ := limited(t, env, 1)
	ctx := context.Background()
	seed := func(sk string, size int) {
		if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: sized("ACCT#u", sk, size)}); err != nil {
			t.Fatal(err)
		}
	}
	set := func(sk, name, value string, txn bool) func() error {
		expr := "SET " + name + " = :v"
		values := map[string]types.AttributeValue{":v": &types.AttributeValueMemberS{Value: value}}
		return func() error {
			if txn {
				_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
					{Update: &types.Update{TableName: &env.Ledger, Key: key("ACCT#u", sk), UpdateExpression: &expr, ExpressionAttributeValues: values}},
				}})
				return err
			}
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &env.Ledger, Key: key("ACCT#u", sk), UpdateExpression: &expr, ExpressionAttributeValues: values})
			return err
		}
	}
	long := "a_rather_long_attribute_name" // 28 bytes
	for _, tc := range []struct {
		description string
		before      int
		name, value string
		write, txn  float64
	}{
		{"stays within 1 KB", 1000, "g", strings.Repeat("y", 23), 1, 2},              // after: 1000 + 1 + 23 = 1024
		{"grows past 1 KB by its value", 1000, "g", strings.Repeat("y", 24), 2, 4},   // 1025
		{"grows past 1 KB by its name", 1000, long, "y", 2, 4},                       // 1000 + 28 + 1
		{"shrinks from 1.5 KB", 1500, "d", "short", 2, 4},                            // before: 1500
		{"grows from 4,000 B past 4 KB", 4000, "g", strings.Repeat("y", 200), 5, 10}, // 4201
	} {
		seed("S", tc.before)
		if got := charged(t, p, env.Ledger, set("S", tc.name, tc.value, false)); got.Write != tc.write {
			t.Errorf("UpdateItem that %s: %v write units, want %v", tc.description, got.Write, tc.write)
		}
		seed("T", tc.before)
		if got := charged(t, p, env.Ledger, set("T", tc.name, tc.value, true)); got.Write != tc.txn {
			t.Errorf("a transaction's update that %s: %v write units, want %v", tc.description, got.Write, tc.txn)
		}
	}
	// An update of an item that is not there creates it: its size after.
	if got := charged(t, p, env.Ledger, set("new", "g", strings.Repeat("y", 1100), true)); got.Write != 4 {
		t.Errorf("a transaction's update creating a 1.1 KB item: %v write units, want 4", got.Write)
	}
}

// A strongly consistent read costs 1 unit per started 4 KB, an eventually
// consistent one half, a transactional one twice; a Query the sum of its
// items rounded up to 4 KB.
func TestReadUnitsPerStarted4KB(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, db, _ := limited(t, env, 1)
	ctx := context.Background()
	sizes := map[string]int{"a": 4096, "b": 4097, "c": 100, "d": 2000}
	for sk, size := range sizes {
		if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: sized("ACCT#r", sk, size)}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(sk string, consistent bool) func() error {
		return func() error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.Ledger, Key: key("ACCT#r", sk), ConsistentRead: aws.Bool(consistent)})
			return err
		}
	}
	for _, tc := range []struct {
		sk         string
		consistent bool
		want       float64
	}{
		{"a", true, 1}, {"a", false, 0.5}, {"b", true, 2}, {"b", false, 1}, {"missing", true, 1},
	} {
		if got := charged(t, p, env.Ledger, get(tc.sk, tc.consistent)); got.Read != tc.want || got.Write != 0 {
			t.Errorf("GetItem of %q (consistent %v): %+v units, want %v read", tc.sk, tc.consistent, got, tc.want)
		}
	}
	txn := func() error {
		_, err := db.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: []types.TransactGetItem{
			{Get: &types.Get{TableName: &env.Ledger, Key: key("ACCT#r", "a")}},
			{Get: &types.Get{TableName: &env.Ledger, Key: key("ACCT#r", "b")}},
		}})
		return err
	}
	if got := charged(t, p, env.Ledger, txn); got.Read != 2*(1+2) {
		t.Errorf("TransactGetItems of 4 KB and 4 KB + 1: %v read units, want 6", got.Read)
	}
	query := func(consistent bool) func() error {
		return func() error {
			_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: &env.Ledger, ConsistentRead: aws.Bool(consistent),
				KeyConditionExpression:    aws.String("#pk = :pk AND SK BETWEEN :c AND :d"),
				ExpressionAttributeNames:  map[string]string{"#pk": "PK"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "ACCT#r"}, ":c": &types.AttributeValueMemberS{Value: "c"}, ":d": &types.AttributeValueMemberS{Value: "d"}}})
			return err
		}
	}
	// c and d: 2,100 B together, one unit; a + b + c + d: 10,293 B, three.
	if got := charged(t, p, env.Ledger, query(true)); got.Read != 1 {
		t.Errorf("a consistent Query of 2,100 B: %v read units, want 1", got.Read)
	}
	all := func() error {
		_, err := db.Query(ctx, &dynamodb.QueryInput{TableName: &env.Ledger, KeyConditionExpression: aws.String("PK = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "ACCT#r"}}})
		return err
	}
	if got := charged(t, p, env.Ledger, all); got.Read != 1.5 {
		t.Errorf("an eventually consistent Query of 10,293 B: %v read units, want 1.5", got.Read)
	}
}

// Over a partition's limit, requests fail as DynamoDB fails them, decoded
// by the AWS SDK into its error types, and write nothing; other partitions
// go on; the partition takes requests again as time passes.
func TestOverThePartitionLimitIsThrottled(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, db, clk := limited(t, env, 0.01) // 10 write units and 30 read units a second
	ctx := context.Background()
	put := func(pk, sk string) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: sized(pk, sk, 1000)})
		return err
	}
	for i := range 10 {
		if err := put("ACCT#hot", string(rune('a'+i))); err != nil {
			t.Fatalf("write %d of 10 within the limit: %v", i+1, err)
		}
	}
	var throttled *types.ThrottlingException
	if err := put("ACCT#hot", "over"); !errors.As(err, &throttled) {
		t.Fatalf("the 11th write unit in a second: %v, want a ThrottlingException", err)
	}
	if len(throttled.ThrottlingReasons) != 1 || aws.ToString(throttled.ThrottlingReasons[0].Reason) != "TableWriteKeyRangeThroughputExceeded" {
		t.Errorf("throttling reasons %+v, want TableWriteKeyRangeThroughputExceeded", throttled.ThrottlingReasons)
	}
	if err := put("ACCT#cold", "a"); err != nil {
		t.Errorf("a write to another partition: %v", err)
	}

	// A transaction with items on the hot partition and on a cold one is
	// cancelled with ThrottlingError for the hot items and None for the
	// others, and writes none of them.
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: &env.Ledger, Item: sized("BUDGET#cold", "x", 100)}},
		{Put: &types.Put{TableName: &env.Ledger, Item: sized("ACCT#hot", "x", 100)}},
	}})
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		t.Fatalf("a transaction on the hot partition: %v, want a TransactionCanceledException", err)
	}
	var codes []string
	for _, r := range canceled.CancellationReasons {
		codes = append(codes, aws.ToString(r.Code))
	}
	if strings.Join(codes, ",") != "None,ThrottlingError" {
		t.Errorf("cancellation reasons %v, want [None ThrottlingError]", codes)
	}
	out, err := env.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.Ledger, Key: key("BUDGET#cold", "x"), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item != nil {
		t.Errorf("the throttled transaction's cold item: %v, %v; want not written", out.Item, err)
	}

	// Reads: 30 units a second.
	get := func() error {
		_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &env.Ledger, Key: key("ACCT#hot", "a"), ConsistentRead: aws.Bool(true)})
		return err
	}
	for i := range 30 {
		if err := get(); err != nil {
			t.Fatalf("read %d of 30 within the limit: %v", i+1, err)
		}
	}
	if err := get(); !errors.As(err, &throttled) || aws.ToString(throttled.ThrottlingReasons[0].Reason) != "TableReadKeyRangeThroughputExceeded" {
		t.Fatalf("the 31st read unit in a second: %v, want a ThrottlingException for reads", err)
	}

	// A second later the partition has its units again.
	clk.advance(time.Second)
	if err := put("ACCT#hot", "later"); err != nil {
		t.Errorf("a write a second later: %v", err)
	}
	if err := get(); err != nil {
		t.Errorf("a read a second later: %v", err)
	}
	want := map[string]int64{"ACCT": 3}
	if got := p.Stats().Throttles[env.Ledger]; len(got) != 1 || got["ACCT"] != want["ACCT"] {
		t.Errorf("throttles by key kind %v, want %v", got, want)
	}
}

// Without limits the proxy charges and refuses nothing.
func TestNoLimitsByDefault(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p := start(t, env, 0)
	db := dynamolocal.NewClient(p.URL)
	for i := range 20 {
		if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &env.Ledger, Item: sized("ACCT#x", string(rune('a'+i)), 4000)}); err != nil {
			t.Fatal(err)
		}
	}
	if st := p.Stats(); len(st.Units) != 0 || st.Throttled() != 0 {
		t.Errorf("without limits the proxy charged %v and throttled %d", st.Units, st.Throttled())
	}
}

// A request the proxy cannot price (here an update of a table that is not
// there, whose item it cannot read) gets DynamoDB's own answer, uncharged.
func TestAnUnpricedRequestGetsDynamoDBsAnswer(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, db, _ := limited(t, env, 1)
	_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String(env.Ledger + "-missing"), Key: key("ACCT#x", "A"),
		UpdateExpression: aws.String("SET n = :n"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "1"}}})
	var missing *types.ResourceNotFoundException
	if !errors.As(err, &missing) {
		t.Fatalf("an update of a missing table through the limits: %v, want a ResourceNotFoundException", err)
	}
	if st := p.Stats(); st.Unpriced != 1 || len(st.Units) != 0 {
		t.Errorf("unpriced %d, units %v; want 1 and none", st.Unpriced, st.Units)
	}
}
