package ddbwire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DecodeItem reads the "Item" of a GetItem answer's JSON 1.0 body (nil if
// the body has none: no such item), skipping every other field. The SDK's
// deserialiser reads the same items from the same bodies
// (TestGetItemMatchesSDK).
func DecodeItem(body []byte) (map[string]types.AttributeValue, error) {
	d := decoder{b: body}
	var item map[string]types.AttributeValue
	err := d.object(func(key string) error {
		if key != "Item" {
			return d.skip()
		}
		var err error
		item, err = d.attributeMap()
		return err
	})
	if err == nil {
		if d.ws(); d.i != len(d.b) {
			err = d.fail("data after the answer")
		}
	}
	return item, err
}

// decoder is a reader of the JSON DynamoDB answers with: objects, arrays,
// strings, true, false, null, and numbers only where skipped.
type decoder struct {
	b []byte
	i int
}

var errSyntax = errors.New("ddbwire: malformed answer")

func (d *decoder) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", errSyntax, what, d.i)
}

func (d *decoder) ws() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\n' || d.b[d.i] == '\r' || d.b[d.i] == '\t') {
		d.i++
	}
}

// expect consumes c after white space.
func (d *decoder) expect(c byte) error {
	if d.ws(); d.i >= len(d.b) || d.b[d.i] != c {
		return d.fail(fmt.Sprintf("want %q", c))
	}
	d.i++
	return nil
}

// peek is the next byte after white space (0 at the end).
func (d *decoder) peek() byte {
	if d.ws(); d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// object calls field for each key of an object, positioned at its value.
func (d *decoder) object(field func(key string) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.i++
		return nil
	}
	for {
		key, err := d.str()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return d.fail("want , or }")
		}
	}
}

// array calls elem for each element of an array, positioned at it.
func (d *decoder) array(elem func() error) error {
	if err := d.expect('['); err != nil {
		return err
	}
	if d.peek() == ']' {
		d.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return nil
		default:
			return d.fail("want , or ]")
		}
	}
}

// str reads a string; one without escapes is a copy of its bytes, one with
// them is encoding/json's reading of it.
func (d *decoder) str() (string, error) {
	if err := d.expect('"'); err != nil {
		return "", err
	}
	start, escaped := d.i, false
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '\\':
			escaped = true
			d.i++
		case c == '"':
			raw := d.b[start:d.i]
			d.i++
			if !escaped {
				return string(raw), nil
			}
			var s string
			if err := json.Unmarshal(d.b[start-1:d.i], &s); err != nil {
				return "", fmt.Errorf("%w: %w", errSyntax, err)
			}
			return s, nil
		case c < 0x20:
			return "", d.fail("control character in a string")
		}
	}
	return "", d.fail("unterminated string")
}

func (d *decoder) boolean() (bool, error) {
	d.ws()
	switch {
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		return true, nil
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
		return false, nil
	}
	return false, d.fail("want true or false")
}

// skip passes over any JSON value.
func (d *decoder) skip() error {
	switch c := d.peek(); {
	case c == '{':
		return d.object(func(string) error { return d.skip() })
	case c == '[':
		return d.array(d.skip)
	case c == '"':
		_, err := d.str()
		return err
	case c == 't' || c == 'f':
		_, err := d.boolean()
		return err
	case c == 'n' && len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null":
		d.i += 4
		return nil
	case c == '-' || c >= '0' && c <= '9':
		for d.i < len(d.b) && (d.b[d.i] == '-' || d.b[d.i] == '+' || d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E' || d.b[d.i] >= '0' && d.b[d.i] <= '9') {
			d.i++
		}
		return nil
	}
	return d.fail("want a value")
}

func (d *decoder) attributeMap() (map[string]types.AttributeValue, error) {
	m := map[string]types.AttributeValue{}
	err := d.object(func(key string) error {
		v, err := d.attributeValue()
		m[key] = v
		return err
	})
	return m, err
}

func (d *decoder) strings() ([]string, error) {
	ss := []string{}
	err := d.array(func() error {
		s, err := d.str()
		ss = append(ss, s)
		return err
	})
	return ss, err
}

func (d *decoder) bytes() ([]byte, error) {
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(s)
}

// attributeValue reads {"S":"x"} and its kin (appendAttributeValue's).
func (d *decoder) attributeValue() (types.AttributeValue, error) {
	var v types.AttributeValue
	err := d.object(func(kind string) error {
		if v != nil {
			return d.fail("an attribute value of two kinds")
		}
		var err error
		switch kind {
		case "S":
			var s string
			s, err = d.str()
			v = &types.AttributeValueMemberS{Value: s}
		case "N":
			var s string
			s, err = d.str()
			v = &types.AttributeValueMemberN{Value: s}
		case "B":
			var b []byte
			b, err = d.bytes()
			v = &types.AttributeValueMemberB{Value: b}
		case "BOOL":
			var b bool
			b, err = d.boolean()
			v = &types.AttributeValueMemberBOOL{Value: b}
		case "NULL":
			var b bool
			b, err = d.boolean()
			v = &types.AttributeValueMemberNULL{Value: b}
		case "M":
			var m map[string]types.AttributeValue
			m, err = d.attributeMap()
			v = &types.AttributeValueMemberM{Value: m}
		case "L":
			l := []types.AttributeValue{}
			err = d.array(func() error {
				e, err := d.attributeValue()
				l = append(l, e)
				return err
			})
			v = &types.AttributeValueMemberL{Value: l}
		case "SS", "NS":
			var ss []string
			ss, err = d.strings()
			if kind == "SS" {
				v = &types.AttributeValueMemberSS{Value: ss}
			} else {
				v = &types.AttributeValueMemberNS{Value: ss}
			}
		case "BS":
			bs := [][]byte{}
			err = d.array(func() error {
				b, err := d.bytes()
				bs = append(bs, b)
				return err
			})
			v = &types.AttributeValueMemberBS{Value: bs}
		default:
			return fmt.Errorf("attribute value of kind %q: %w", kind, errUnsupported)
		}
		return err
	})
	if err == nil && v == nil {
		err = d.fail("an attribute value of no kind")
	}
	return v, err
}
