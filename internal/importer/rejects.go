package importer

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// RejectsPath is where the refused lines of input go by default: beside
// it, grants.csv -> grants.rejects.csv.
func RejectsPath(input string) string {
	ext := filepath.Ext(input)
	return strings.TrimSuffix(input, ext) + ".rejects" + ext
}

// Rejects writes refused lines in the input's format, each with the
// request_id it was sent under and line, reason and message added, so that
// the file can be fixed and imported again as it is.
type Rejects struct {
	format Format
	w      *bufio.Writer
	csv    *csv.Writer
	header []string // CSV: the input's columns written back
	keep   []int    // CSV: where each of header's columns is in the input's
	idAt   int      // CSV: request_id's column in header
	wrote  bool
	n      int
}

// NewRejects writes rejects in format f to w; header is the input's CSV
// header (Reader.Header).
func NewRejects(w io.Writer, f Format, header []string) *Rejects {
	r := &Rejects{format: f, w: bufio.NewWriter(w)}
	if f == CSV {
		r.csv = csv.NewWriter(r.w)
		r.idAt = -1
		for i, name := range header {
			if isRejectColumn(name) {
				continue
			}
			if name == "request_id" || name == "requestId" {
				r.idAt = len(r.header)
			}
			r.header = append(r.header, name)
			r.keep = append(r.keep, i)
		}
		if r.idAt < 0 {
			r.idAt = len(r.header)
			r.header = append(r.header, "request_id")
		}
	}
	return r
}

// Count is the lines written so far.
func (r *Rejects) Count() int { return r.n }

// Write writes l, refused for why.
func (r *Rejects) Write(l Line, why *Refusal) error {
	r.n++
	if r.format == CSV {
		return r.writeRow(l, why)
	}
	out := map[string]any{}
	if l.record.object != nil {
		for k, v := range l.record.object {
			out[k] = v
		}
	} else {
		out["input"] = l.record.text // not JSON: the line as read, to fix by hand
	}
	if l.RequestID != "" && idOf(l.record.object) == "" {
		out["request_id"] = l.RequestID
	}
	out["line"], out["reason"], out["message"] = l.Number, why.Reason, why.Message
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = r.w.Write(b)
	return err
}

func (r *Rejects) writeRow(l Line, why *Refusal) error {
	if !r.wrote {
		r.wrote = true
		if err := r.csv.Write(append(slices.Clone(r.header), RejectColumns...)); err != nil {
			return err
		}
	}
	row := make([]string, 0, len(r.header)+len(RejectColumns))
	for _, i := range r.keep {
		cell := "" // a row shorter than the header: its message says so
		if i < len(l.record.cells) {
			cell = l.record.cells[i]
		}
		row = append(row, cell)
	}
	for len(row) < len(r.header) { // request_id, added
		row = append(row, "")
	}
	if row[r.idAt] == "" {
		row[r.idAt] = l.RequestID
	}
	row = append(row, strconv.Itoa(l.Number), why.Reason, why.Message)
	return r.csv.Write(row)
}

// Flush writes what is buffered.
func (r *Rejects) Flush() error {
	if r.csv != nil {
		r.csv.Flush()
		if err := r.csv.Error(); err != nil {
			return err
		}
	}
	return r.w.Flush()
}
