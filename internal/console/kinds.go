package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
)

// kindsPage is what /console/kinds shows: the program's point kinds, and
// for an admin the forms that create and change them.
type kindsPage struct {
	Kinds     []kindRow
	Admin     bool
	RequestID string // the create form's, fresh on every page
}

type kindRow struct {
	*pb.PointKind
	Merchants, Categories, Excluded string // comma-separated, as the forms take them
	RequestID                       string // its update form's
}

func (c *Console) kinds(v *visit) { v.kindsPage(nil, notices[v.r.FormValue("done")]) }

func (v *visit) kindsPage(failed error, notice string) {
	ctx, cancel := v.ctx()
	defer cancel()
	p := kindsPage{Admin: v.id.Role == auth.RoleAdmin || v.c.o.Auth.Insecure(), RequestID: "console-" + client.NewRequestID()}
	res, err := v.kinds.ListPointKinds(ctx, connect.NewRequest(&pb.ListPointKindsRequest{}))
	if err == nil {
		for _, k := range res.Msg.Kinds {
			p.Kinds = append(p.Kinds, kindRow{PointKind: k, Merchants: strings.Join(k.Merchants, ", "),
				Categories: strings.Join(k.Categories, ", "), Excluded: strings.Join(k.ExcludedCategories, ", "),
				RequestID: "console-" + client.NewRequestID()})
		}
	}
	if failed == nil {
		failed = err
	}
	v.render(httpStatus(failed), "kinds", "Point kinds", p, failed, notice)
}

// kindForm is a create or update form's fields: the lists comma- (or
// line-) separated, an empty priority unset (50).
type kindForm struct {
	id, description, requestID                string
	priority                                  *int32
	merchants, categories, excludedCategories []string
}

func (v *visit) kindForm() (kindForm, error) {
	f := v.r.PostForm
	k := kindForm{id: strings.TrimSpace(f.Get("kind_id")), description: strings.TrimSpace(f.Get("description")), requestID: f.Get("request_id"),
		merchants: list(f.Get("merchants")), categories: list(f.Get("categories")), excludedCategories: list(f.Get("excluded_categories"))}
	if p := strings.TrimSpace(f.Get("priority")); p != "" {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			return k, connect.NewError(connect.CodeInvalidArgument, errors.New("a kind's priority is a whole number (empty: 50)"))
		}
		n32 := int32(n)
		k.priority = &n32
	}
	return k, nil
}

// list splits a form's list at commas and line ends, without blanks.
func list(s string) []string {
	var out []string
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func (c *Console) createKind(v *visit) {
	k, err := v.kindForm()
	if err == nil {
		ctx, cancel := v.ctx()
		defer cancel()
		_, err = v.kinds.CreatePointKind(ctx, connect.NewRequest(&pb.CreatePointKindRequest{
			KindId: k.id, Description: k.description, Priority: k.priority, Merchants: k.merchants,
			Categories: k.categories, ExcludedCategories: k.excludedCategories, RequestId: k.requestID,
		}))
	}
	if err != nil {
		v.kindsPage(err, "")
		return
	}
	http.Redirect(v.w, v.r, Prefix+"kinds?done=kind-created", http.StatusSeeOther)
}

func (c *Console) updateKind(v *visit) {
	k, err := v.kindForm()
	if err == nil {
		ctx, cancel := v.ctx()
		defer cancel()
		_, err = v.kinds.UpdatePointKind(ctx, connect.NewRequest(&pb.UpdatePointKindRequest{
			KindId: k.id, Description: k.description, Priority: k.priority, Merchants: k.merchants,
			Categories: k.categories, ExcludedCategories: k.excludedCategories, RequestId: k.requestID,
		}))
	}
	if err != nil {
		v.kindsPage(err, "")
		return
	}
	http.Redirect(v.w, v.r, Prefix+"kinds?done=kind-updated", http.StatusSeeOther)
}
