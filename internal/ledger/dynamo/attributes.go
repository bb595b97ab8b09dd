package dynamo

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
)

// Attribute values: the decoder that reads an item's typed attributes; the
// values the items are written with are internal/ddbattr's, as every
// table's.

// decoder reads typed attributes and remembers the first problem, so that a
// malformed item is reported once with the attribute at fault.
type decoder struct {
	item  map[string]types.AttributeValue
	first error
}

func (d *decoder) fail(name string, why string) {
	if d.first == nil {
		d.first = fmt.Errorf("attribute %s: %s", name, why)
	}
}

func (d *decoder) err(what string) error {
	if d.first != nil {
		pk, _ := d.item["PK"].(*types.AttributeValueMemberS)
		sk, _ := d.item["SK"].(*types.AttributeValueMemberS)
		var where string
		if pk != nil && sk != nil {
			where = " " + pk.Value + " " + sk.Value
		}
		return fmt.Errorf("decode %s%s: %w", what, where, d.first)
	}
	return nil
}

func (d *decoder) optStr(name string) string {
	v, ok := d.item[name]
	if !ok {
		return ""
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		d.fail(name, "not a string")
		return ""
	}
	return s.Value
}

func (d *decoder) str(name string) string {
	if _, ok := d.item[name]; !ok {
		d.fail(name, "missing")
		return ""
	}
	return d.optStr(name)
}

func (d *decoder) num(name string) decimal.Decimal {
	v, ok := d.item[name].(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, "missing or not a number")
		return decimal.Zero
	}
	n, err := decimal.NewFromString(v.Value)
	if err != nil {
		d.fail(name, err.Error())
	}
	return n
}

// mapAttr reads a map attribute.
func (d *decoder) mapAttr(name string) (map[string]types.AttributeValue, bool) {
	m, ok := d.item[name].(*types.AttributeValueMemberM)
	if !ok {
		d.fail(name, "not a map")
		return nil, false
	}
	return m.Value, true
}

// optNum reads a number that may be absent: zero then.
func (d *decoder) optNum(name string) decimal.Decimal {
	if _, ok := d.item[name]; !ok {
		return decimal.Zero
	}
	return d.num(name)
}

func (d *decoder) int(name string) int64 {
	v, ok := d.item[name].(*types.AttributeValueMemberN)
	if !ok {
		d.fail(name, "missing or not a number")
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		d.fail(name, err.Error())
	}
	return n
}

func (d *decoder) time(name string) time.Time {
	s := d.str(name)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		d.fail(name, err.Error())
	}
	return t
}

func (d *decoder) strMap(name string) map[string]string {
	v, ok := d.item[name]
	if !ok {
		return nil
	}
	m, ok := v.(*types.AttributeValueMemberM)
	if !ok {
		d.fail(name, "not a map")
		return nil
	}
	out := make(map[string]string, len(m.Value))
	for k, v := range m.Value {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(name+"."+k, "not a string")
			continue
		}
		out[k] = s.Value
	}
	return out
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
