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

// formatTime writes t in UTC as timeLayout, by hand: the write path
// formats a few times an entry, and time.Format reads its layout anew each
// time (2% of serve's CPU under uniform, issue 37). Years outside 0000 to
// 9999, which the layout's fixed width cannot hold, go through Format.
func formatTime(t time.Time) string {
	t = t.UTC()
	y, mo, d := t.Date()
	if y < 0 || y > 9999 {
		return t.Format(timeLayout)
	}
	h, mi, s := t.Clock()
	var b [len(timeLayout)]byte // 2006-01-02T15:04:05.000000Z
	digits(b[0:4], y)
	b[4] = '-'
	digits(b[5:7], int(mo))
	b[7] = '-'
	digits(b[8:10], d)
	b[10] = 'T'
	digits(b[11:13], h)
	b[13] = ':'
	digits(b[14:16], mi)
	b[16] = ':'
	digits(b[17:19], s)
	b[19] = '.'
	digits(b[20:26], t.Nanosecond()/1000)
	b[26] = 'Z'
	return string(b[:])
}

// digits writes n into b in decimal, zero-padded to b's width.
func digits(b []byte, n int) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}
