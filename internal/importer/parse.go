package importer

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// Format is how a file of credits is written.
type Format int

const (
	JSONLines Format = iota + 1 // one JSON object a line
	CSV                         // a header of field names, then one credit a row
)

func (f Format) String() string {
	switch f {
	case JSONLines:
		return "JSON Lines"
	case CSV:
		return "CSV"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatOf is the format a file's name says: .csv is CSV; .jsonl, .ndjson
// and .json are JSON Lines.
func FormatOf(name string) (Format, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return CSV, nil
	case ".jsonl", ".ndjson", ".json":
		return JSONLines, nil
	}
	return 0, fmt.Errorf("%s: name it .csv, or .jsonl for JSON Lines", name)
}

// ParseFormat reads a -format flag: csv or jsonl.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "csv":
		return CSV, nil
	case "jsonl", "ndjson", "json":
		return JSONLines, nil
	}
	return 0, fmt.Errorf("format %q: want csv or jsonl", s)
}

// The reasons of refusals found in the file itself, beside the ledger's
// (client.Reason).
const (
	// The line is not a JSON object, or not a GrantRequest: an unknown
	// field, a value of the wrong type, a timestamp that does not parse.
	ReasonMalformedLine = "MALFORMED_LINE"
	// The line has no request_id and no -id-prefix gives it one.
	ReasonMissingRequestID = "MISSING_REQUEST_ID"
)

// Refusal is why a line was not granted: the ledger's reason (client.Reason)
// or one of the file's own (ReasonMalformedLine, ...), and a message for the
// person who fixes the line.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// RejectColumns are the fields a rejects file adds to each line. The
// reader drops them, so that a rejects file, fixed, is imported as it is;
// GrantRequest has no field of these names (a test keeps it so).
var RejectColumns = []string{"line", "reason", "message"}

func isRejectColumn(name string) bool {
	for _, c := range RejectColumns {
		if name == c {
			return true
		}
	}
	return false
}

// A Line is one credit of the file, as read.
type Line struct {
	Number int // in the file, from 1 (a CSV's header is line 1)
	// Grant is the request the line makes, with its request_id (its own or
	// the prefix's); nil when Refusal says why there is none.
	Grant   *pb.GrantRequest
	Refusal *Refusal
	// RequestID is the id the line is sent under: Grant's, or for a line
	// that did not parse, the one it would have had ("" if none).
	RequestID string
	record    record
}

// record is a line's fields as read, for the rejects file.
type record struct {
	object map[string]json.RawMessage // JSON Lines: the object
	text   string                     // JSON Lines: the line, when it is no object
	cells  []string                   // CSV: the row
}

// MaxLineBytes bounds a line of JSON Lines: a longer one ends the import
// (a file of credits has no such lines; a binary file has).
const MaxLineBytes = 1 << 20

// Reader reads a file of credits line by line: memory is one line's, not
// the file's.
type Reader struct {
	format   Format
	idPrefix string

	lines *bufio.Scanner // JSON Lines
	n     int            // JSON Lines: the last line's number

	rows   *csv.Reader // CSV
	header []string
	fields []protoreflect.FieldDescriptor // CSV: each column's field; nil for metadata.<key> and reject columns
}

var grantFields = (&pb.GrantRequest{}).ProtoReflect().Descriptor().Fields()

// NewReader reads credits in format f from r. Lines without a request_id
// get idPrefix:<line number>, or are refused if idPrefix is empty. A CSV
// file's header is read here: a column that is no field of GrantRequest is
// an error (it would refuse every line).
func NewReader(r io.Reader, f Format, idPrefix string) (*Reader, error) {
	rd := &Reader{format: f, idPrefix: idPrefix}
	switch f {
	case JSONLines:
		rd.lines = bufio.NewScanner(r)
		rd.lines.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	case CSV:
		rd.rows = csv.NewReader(r)
		rd.rows.FieldsPerRecord = -1 // a row of another width is refused alone
		header, err := rd.rows.Read()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the CSV file is empty: it needs a header of field names (user_id,amount,request_id,...)")
		}
		if err != nil {
			return nil, fmt.Errorf("CSV header: %w", err)
		}
		if err := rd.setHeader(header); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown format %v", f)
	}
	return rd, nil
}

// Header is a CSV file's header (nil for JSON Lines).
func (r *Reader) Header() []string { return r.header }

func (r *Reader) setHeader(header []string) error {
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a spreadsheet's byte order mark
	}
	seen := map[string]bool{}
	r.fields = make([]protoreflect.FieldDescriptor, len(header))
	for i, name := range header {
		if seen[name] {
			return fmt.Errorf("CSV header: column %q appears twice", name)
		}
		seen[name] = true
		switch {
		case isRejectColumn(name):
		case strings.HasPrefix(name, "metadata."):
			if name == "metadata." {
				return errors.New("CSV header: a metadata column needs a key: metadata.<key>")
			}
		default:
			fd := fieldNamed(name)
			if fd == nil {
				return fmt.Errorf("CSV header: column %q is no field of Grant (%s); metadata goes in metadata.<key> columns", name, fieldNames())
			}
			if fd.IsMap() {
				return fmt.Errorf("CSV header: column %q: put each key in a column of its own, %s.<key>", name, name)
			}
			r.fields[i] = fd
		}
	}
	r.header = header
	return nil
}

func fieldNamed(name string) protoreflect.FieldDescriptor {
	if fd := grantFields.ByName(protoreflect.Name(name)); fd != nil {
		return fd
	}
	return grantFields.ByJSONName(name)
}

func fieldNames() string {
	names := make([]string, grantFields.Len())
	for i := range names {
		names[i] = string(grantFields.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// Next is the next line of the file; io.EOF after the last. A line that
// does not make a request comes back with its Refusal; an error is a file
// that cannot be read further. Blank lines of JSON Lines are skipped.
func (r *Reader) Next() (Line, error) {
	if r.format == CSV {
		return r.nextRow()
	}
	for r.lines.Scan() {
		r.n++
		text := bytes.TrimSpace(r.lines.Bytes())
		if len(text) == 0 {
			continue
		}
		return r.jsonLine(r.n, text), nil
	}
	if err := r.lines.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Line{}, fmt.Errorf("line %d is longer than %d bytes", r.n+1, MaxLineBytes)
		}
		return Line{}, err
	}
	return Line{}, io.EOF
}

func (r *Reader) jsonLine(n int, text []byte) Line {
	l := Line{Number: n}
	var object map[string]json.RawMessage
	if err := json.Unmarshal(text, &object); err != nil || object == nil {
		l.record.text = string(text)
		l.RequestID = r.derivedID(n)
		l.Refusal = &Refusal{Reason: ReasonMalformedLine, Message: "not a JSON object"}
		return l
	}
	for _, c := range RejectColumns {
		delete(object, c)
	}
	l.record.object = object
	return r.decode(l, object)
}

// decode makes l's request from object, the line as a JSON object, with
// protojson: the proto says which fields there are and what they hold.
func (r *Reader) decode(l Line, object map[string]json.RawMessage) Line {
	b, err := json.Marshal(object)
	if err != nil { // cannot happen: object was decoded from JSON or built of strings
		l.Refusal = &Refusal{Reason: ReasonMalformedLine, Message: err.Error()}
		return l
	}
	g := &pb.GrantRequest{}
	if err := protojson.Unmarshal(b, g); err != nil {
		l.RequestID = idOf(object)
		if l.RequestID == "" {
			l.RequestID = r.derivedID(l.Number)
		}
		l.Refusal = &Refusal{Reason: ReasonMalformedLine, Message: protojsonMessage(err)}
		return l
	}
	if g.RequestId == "" {
		g.RequestId = r.derivedID(l.Number)
	}
	l.RequestID = g.RequestId
	if g.RequestId == "" {
		l.Refusal = &Refusal{Reason: ReasonMissingRequestID, Message: "no request_id, and no -id-prefix to make one of the line number"}
		return l
	}
	l.Grant = g
	return l
}

func (r *Reader) derivedID(n int) string {
	if r.idPrefix == "" {
		return ""
	}
	return r.idPrefix + ":" + strconv.Itoa(n)
}

// idOf is object's request_id, if it is a string.
func idOf(object map[string]json.RawMessage) string {
	var id string
	for _, k := range []string{"request_id", "requestId"} {
		if raw, ok := object[k]; ok && json.Unmarshal(raw, &id) == nil && id != "" {
			return id
		}
	}
	return ""
}

// protojson's messages place the error in the object decode made ("(line
// 1:15)"), which is not the file's.
var protojsonPlace = regexp.MustCompile(`^proto:\s*(\(line \d+:\d+\):\s*)?`)

func protojsonMessage(err error) string {
	return protojsonPlace.ReplaceAllString(err.Error(), "")
}

func (r *Reader) nextRow() (Line, error) {
	cells, err := r.rows.Read()
	if errors.Is(err, io.EOF) {
		return Line{}, io.EOF
	}
	n, _ := r.rows.FieldPos(0)
	var perr *csv.ParseError
	if errors.As(err, &perr) {
		return Line{Number: perr.StartLine, RequestID: r.derivedID(perr.StartLine), record: record{cells: cells},
			Refusal: &Refusal{Reason: ReasonMalformedLine, Message: perr.Err.Error()}}, nil
	}
	if err != nil {
		return Line{}, err
	}
	l := Line{Number: n, record: record{cells: cells}}
	if len(cells) != len(r.header) {
		l.RequestID = r.derivedID(n)
		l.Refusal = &Refusal{Reason: ReasonMalformedLine, Message: fmt.Sprintf("%d cells, and the header has %d columns", len(cells), len(r.header))}
		return l, nil
	}
	object := map[string]json.RawMessage{}
	metadata := map[string]string{}
	for i, cell := range cells {
		name := r.header[i]
		switch {
		case cell == "" || isRejectColumn(name):
		case r.fields[i] == nil:
			metadata[strings.TrimPrefix(name, "metadata.")] = cell
		default:
			v, err := cellJSON(r.fields[i], cell)
			if err != nil {
				l.RequestID = r.derivedID(n)
				l.Refusal = &Refusal{Reason: ReasonMalformedLine, Message: fmt.Sprintf("%s: %v", name, err)}
				return l, nil
			}
			object[name] = v
		}
	}
	if len(metadata) > 0 {
		object["metadata"], _ = json.Marshal(metadata)
	}
	return r.decode(l, object), nil
}

// cellJSON is a CSV cell as the JSON value of field fd: a string, which
// protojson reads for strings, numbers, enums, timestamps and durations;
// true or false for a bool; the cell itself for a message or a list
// written as JSON.
func cellJSON(fd protoreflect.FieldDescriptor, cell string) (json.RawMessage, error) {
	switch {
	case fd.IsList(), fd.Kind() == protoreflect.MessageKind && !stringMessage(fd.Message()):
		if !json.Valid([]byte(cell)) {
			return nil, errors.New("want JSON")
		}
		return json.RawMessage(cell), nil
	case fd.Kind() == protoreflect.BoolKind:
		b, err := strconv.ParseBool(cell)
		if err != nil {
			return nil, errors.New("want true or false")
		}
		return json.Marshal(b)
	}
	return json.Marshal(cell)
}

// stringMessage says whether protojson writes messages of md as a string.
func stringMessage(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask",
		"google.protobuf.StringValue", "google.protobuf.BytesValue", "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return true
	}
	return false
}

// KindOf is the point kind a grant names, by its field kind if
// GrantRequest has one: "standard" when it names none.
func KindOf(g *pb.GrantRequest) string {
	if fd := grantFields.ByName("kind"); fd != nil && fd.Kind() == protoreflect.StringKind {
		if k := g.ProtoReflect().Get(fd).String(); k != "" {
			return k
		}
	}
	return "standard"
}
