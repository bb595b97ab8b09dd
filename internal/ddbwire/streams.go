package ddbwire

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
	smithytime "github.com/aws/smithy-go/time"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// LeanGetRecords is an option of the DynamoDB Streams client (New's or
// NewFromConfig's) that reads GetRecords' successful answers with
// DecodeGetRecords instead of the SDK's shape deserializer: the stream
// reader's every page, whose records (each item's images, attribute by
// attribute) the SDK read through its schema-driven decoder, about a tenth
// of the webhook dispatcher's CPU an event (issue 37). The request, its
// signing, its retries and every other answer (errors, other operations,
// a body DecodeGetRecords does not read) are the SDK's, as before: an
// answer it cannot read is handed to the SDK's protocol as it came.
func LeanGetRecords(o *dynamodbstreams.Options) {
	if o.Protocol != nil {
		o.Protocol = leanStreams{ClientProtocol: o.Protocol}
	}
}

type leanStreams struct {
	smithyhttp.ClientProtocol
	keep func(keys map[string]types.AttributeValue) bool // nil: every record's images
}

// KeepImagesOf is a per-call option of GetRecords for a client made with
// LeanGetRecords (for any other it does nothing): the records whose Keys
// keep refuses come without their images (NewImage and OldImage nil), not
// read at all; the rest as the SDK reads them. It is for a reader that
// looks at the images of some items only (the stream consumer reads the
// ledger's entries, not its accounts' or requests' records, whose images
// hold two thirds of a purchase's attributes in a page). A record
// whose images come before its Keys in the answer keeps them.
func KeepImagesOf(keep func(keys map[string]types.AttributeValue) bool) func(*dynamodbstreams.Options) {
	return func(o *dynamodbstreams.Options) {
		if p, ok := o.Protocol.(leanStreams); ok {
			p.keep = keep
			o.Protocol = p
		}
	}
}

// streamBodies are GetRecords bodies being read (DecodeGetRecords copies
// what it keeps).
var streamBodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (p leanStreams) DeserializeResponse(ctx context.Context, schema *smithy.OperationSchema, registry *smithy.TypeRegistry, resp *smithyhttp.Response, out smithy.Deserializable) error {
	o, ok := out.(*dynamodbstreams.GetRecordsOutput)
	if !ok || resp.StatusCode < 200 || resp.StatusCode >= 300 || schema.IsOutputEventStream() {
		return p.ClientProtocol.DeserializeResponse(ctx, schema, registry, resp, out)
	}
	buf := streamBodies.Get().(*bytes.Buffer)
	defer func() {
		buf.Reset()
		streamBodies.Put(buf)
	}()
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return &smithy.DeserializationError{Err: err}
	}
	if decodeGetRecords(buf.Bytes(), o, p.keep) == nil {
		return nil
	}
	*o = dynamodbstreams.GetRecordsOutput{}
	resp.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	return p.ClientProtocol.DeserializeResponse(ctx, schema, registry, resp, out)
}

// DecodeGetRecords reads a GetRecords answer's JSON 1.0 body into out, as
// the SDK reads it (TestGetRecordsMatchesSDK): NextShardIterator and
// Records, each record's fields and its stream record's images; other
// fields skipped. A null where a value is wanted, an attribute value of a
// kind it does not know, or anything malformed is an error (the SDK then
// reads the body).
func DecodeGetRecords(body []byte, out *dynamodbstreams.GetRecordsOutput) error {
	return decodeGetRecords(body, out, nil)
}

func decodeGetRecords(body []byte, out *dynamodbstreams.GetRecordsOutput, keep func(map[string]types.AttributeValue) bool) error {
	if len(body) == 0 {
		return nil // as the SDK: an empty body is an empty output
	}
	d := arenaDecoder{decoder: decoder{b: body}, keep: keep}
	err := d.object(func(key string) error {
		switch key {
		case "NextShardIterator":
			s, err := d.str()
			out.NextShardIterator = &s
			return err
		case "Records":
			out.Records = []types.Record{}
			return d.array(func() error {
				r, err := d.record()
				out.Records = append(out.Records, r)
				return err
			})
		}
		return d.skip()
	})
	if err == nil {
		if d.ws(); d.i != len(d.b) {
			err = d.fail("data after the answer")
		}
	}
	return err
}

// arenaDecoder is a decoder whose strings without escapes (nearly all a
// record holds: keys, names, values) are substrings of text, the record's
// bytes copied once, not a copy each, as the SDK's string arena keeps
// them. What is kept of a record (an entry read from its image) keeps
// that record's text, not the page's.
type arenaDecoder struct {
	decoder
	text string // the bytes of b from base on, as a string
	base int
	keep func(map[string]types.AttributeValue) bool // KeepImagesOf's
}

// record reads the record at d.i with its own text.
func (d *arenaDecoder) record() (types.Record, error) {
	d.ws()
	start := d.i
	if err := d.scan(); err != nil {
		return types.Record{}, err
	}
	d.text, d.base, d.i = string(d.b[start:d.i]), start, start
	r, err := d.streamRecordEntry()
	d.text, d.base = "", 0
	return r, err
}

// scan passes over any JSON value, making nothing of it.
func (d *arenaDecoder) scan() error {
	switch d.peek() {
	case '{', '[':
		open := d.b[d.i]
		d.i++
		if c := d.peek(); c == '}' && open == '{' || c == ']' && open == '[' {
			d.i++
			return nil
		}
		for {
			if open == '{' {
				if d.peek() != '"' {
					return d.fail("want a key")
				}
				if err := d.scan(); err != nil {
					return err
				}
				if err := d.expect(':'); err != nil {
					return err
				}
			}
			if err := d.scan(); err != nil {
				return err
			}
			switch c := d.peek(); {
			case c == ',':
				d.i++
			case c == '}' && open == '{', c == ']' && open == '[':
				d.i++
				return nil
			default:
				return d.fail("want , or the end")
			}
		}
	case '"':
		for d.i++; d.i < len(d.b); d.i++ {
			switch c := d.b[d.i]; {
			case c == '\\':
				d.i++
			case c == '"':
				d.i++
				return nil
			case c < 0x20:
				return d.fail("control character in a string")
			}
		}
		return d.fail("unterminated string")
	}
	return d.decoder.skip() // numbers, true, false, null
}

func (d *arenaDecoder) str() (string, error) {
	if err := d.expect('"'); err != nil {
		return "", err
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '\\':
			d.i = start - 1
			return d.decoder.str() // escapes: the decoder's reading
		case c == '"':
			d.i++
			if start >= d.base && d.i-1-d.base <= len(d.text) {
				return d.text[start-d.base : d.i-1-d.base], nil
			}
			return string(d.b[start : d.i-1]), nil
		case c < 0x20:
			return "", d.fail("control character in a string")
		}
	}
	return "", d.fail("unterminated string")
}

// object is the decoder's, with keys read by str.
func (d *arenaDecoder) object(field func(key string) error) error {
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

// skip is the decoder's, with strings read by str (no copy).
func (d *arenaDecoder) skip() error {
	switch d.peek() {
	case '{':
		return d.object(func(string) error { return d.skip() })
	case '[':
		return d.array(d.skip)
	case '"':
		_, err := d.str()
		return err
	}
	return d.decoder.skip()
}

func (d *arenaDecoder) strings() ([]string, error) {
	ss := []string{}
	err := d.array(func() error {
		s, err := d.str()
		ss = append(ss, s)
		return err
	})
	return ss, err
}

func (d *arenaDecoder) optString() (*string, error) {
	s, err := d.str()
	return &s, err
}

func (d *arenaDecoder) streamRecordEntry() (types.Record, error) {
	var r types.Record
	err := d.object(func(key string) error {
		var err error
		switch key {
		case "awsRegion":
			r.AwsRegion, err = d.optString()
		case "eventID":
			r.EventID, err = d.optString()
		case "eventName":
			var s string
			s, err = d.str()
			r.EventName = types.OperationType(s)
		case "eventSource":
			r.EventSource, err = d.optString()
		case "eventVersion":
			r.EventVersion, err = d.optString()
		case "dynamodb":
			r.Dynamodb = &types.StreamRecord{}
			err = d.streamRecord(r.Dynamodb)
		case "userIdentity":
			r.UserIdentity = &types.Identity{}
			err = d.object(func(key string) error {
				var err error
				switch key {
				case "PrincipalId":
					r.UserIdentity.PrincipalId, err = d.optString()
				case "Type":
					r.UserIdentity.Type, err = d.optString()
				default:
					err = d.skip()
				}
				return err
			})
		default:
			err = d.skip()
		}
		return err
	})
	return r, err
}

func (d *arenaDecoder) streamRecord(sr *types.StreamRecord) error {
	keysSeen := false
	skipImages := func() bool { return d.keep != nil && keysSeen && !d.keep(sr.Keys) }
	return d.object(func(key string) error {
		var err error
		switch key {
		case "ApproximateCreationDateTime":
			var f float64
			if f, err = d.number(); err == nil {
				t := smithytime.ParseEpochSeconds(f)
				sr.ApproximateCreationDateTime = &t
			}
		case "Keys":
			sr.Keys, err = d.streamAttributeMap()
			keysSeen = true
		case "NewImage":
			if skipImages() {
				return d.skip()
			}
			sr.NewImage, err = d.streamAttributeMap()
		case "OldImage":
			if skipImages() {
				return d.skip()
			}
			sr.OldImage, err = d.streamAttributeMap()
		case "SequenceNumber":
			sr.SequenceNumber, err = d.optString()
		case "SizeBytes":
			var f float64
			if f, err = d.number(); err == nil {
				n := int64(f)
				if float64(n) != f {
					return d.fail("SizeBytes is not an integer")
				}
				sr.SizeBytes = &n
			}
		case "StreamViewType":
			var s string
			s, err = d.str()
			sr.StreamViewType = types.StreamViewType(s)
		default:
			err = d.skip()
		}
		return err
	})
}

// number reads a JSON number.
func (d *arenaDecoder) number() (float64, error) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, d.fail("want a number")
	}
	start := d.i
	if err := d.skip(); err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
	if err != nil {
		return 0, d.fail("a number that does not parse")
	}
	return f, nil
}

func (d *arenaDecoder) streamAttributeMap() (map[string]types.AttributeValue, error) {
	m := map[string]types.AttributeValue{}
	err := d.object(func(key string) error {
		v, err := d.streamAttributeValue()
		m[key] = v
		return err
	})
	return m, err
}

// streamAttributeValue is attributeValue for the streams client's twin
// types.
func (d *arenaDecoder) streamAttributeValue() (types.AttributeValue, error) {
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
			m, err = d.streamAttributeMap()
			v = &types.AttributeValueMemberM{Value: m}
		case "L":
			l := []types.AttributeValue{}
			err = d.array(func() error {
				e, err := d.streamAttributeValue()
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
			return d.fail("an attribute value of kind " + strconv.Quote(kind))
		}
		return err
	})
	if err == nil && v == nil {
		err = d.fail("an attribute value of no kind")
	}
	return v, err
}
