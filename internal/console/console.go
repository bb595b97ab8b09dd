// Package console is the web console for the people who answer members
// and keep the books: server-rendered pages (html/template, embedded, one
// layout, no script) under /console/ on the API's port.
//
// Invariants: every action and every read is a call of the API's own
// Connect handlers, in-process, with the signed-in token (the same
// authentication, policy, support limits, rate limit and domain rules as
// any client; a refusal is shown with its code and reason); the token lives
// only in a sealed, HttpOnly, SameSite=Strict cookie, never in a URL, a page
// or a log; every POST carries the session's CSRF token and a same-origin
// Origin; every answer has a Content-Security-Policy with no script at all
// and frame-ancestors 'none'; whatever users and clients wrote is escaped
// by html/template.
package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

//go:embed templates/*.html static/*
var files embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// DefaultSessionTTL is how long a sign-in lasts unless set otherwise.
const DefaultSessionTTL = 8 * time.Hour

// Options say what the console serves.
type Options struct {
	// API is the API's handler (ledgerd's, with its authentication): every
	// page calls it in-process with the session's token.
	API http.Handler
	// Auth tells who may sign in: an admin or support token.
	Auth *auth.Authenticator
	// Key seals session cookies; every instance of a deployment needs the
	// same (auth's DeriveKey gives one). nil: a random key, so sessions
	// last as long as this process.
	Key        []byte
	SessionTTL time.Duration // 0: DefaultSessionTTL
	Now        func() time.Time
	Log        *slog.Logger
}

// Console serves the pages.
type Console struct {
	o     Options
	aead  cipher.AEAD
	pages map[string]*template.Template
	mux   *http.ServeMux
	http  *http.Client
}

// New returns the console.
func New(o Options) (*Console, error) {
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	key := o.Key
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	block, err := aes.NewCipher(key[:32])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, aead: aead, pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	c.http = &http.Client{Transport: inProcess{o.API}}
	for _, name := range []string{"signin", "home", "user", "budgets", "webhooks", "books", "kinds"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		c.pages[name] = t
	}
	static, _ := fs.Sub(files, "static")
	c.mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /console/signin", c.signInPage)
	c.mux.HandleFunc("POST /console/signin", c.signIn)
	c.mux.HandleFunc("POST /console/signout", c.signed(c.signOut))
	c.mux.HandleFunc("GET /console/{$}", c.signed(c.home))
	c.mux.HandleFunc("GET /console/users", c.signed(c.findUser))
	c.mux.HandleFunc("GET /console/users/{user_id}", c.signed(c.user))
	c.mux.HandleFunc("POST /console/users/{user_id}/adjust", c.signed(c.adjust))
	c.mux.HandleFunc("POST /console/users/{user_id}/status", c.signed(c.setStatus))
	c.mux.HandleFunc("POST /console/users/{user_id}/void", c.signed(c.void))
	c.mux.HandleFunc("GET /console/budgets", c.signed(c.budgets))
	c.mux.HandleFunc("POST /console/budgets/topup", c.signed(c.topUp))
	c.mux.HandleFunc("POST /console/budgets/close", c.signed(c.closeBudget))
	c.mux.HandleFunc("GET /console/webhooks", c.signed(c.webhooks))
	c.mux.HandleFunc("POST /console/webhooks/redeliver", c.signed(c.redeliver))
	c.mux.HandleFunc("GET /console/kinds", c.signed(c.kinds))
	c.mux.HandleFunc("POST /console/kinds/create", c.signed(c.createKind))
	c.mux.HandleFunc("POST /console/kinds/update", c.signed(c.updateKind))
	c.mux.HandleFunc("GET /console/books", c.signed(c.books))
	c.mux.HandleFunc("POST /console/books/reconcile", c.signed(c.reconcile))
	c.mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	return c, nil
}

// csp lets the pages load their own style sheet and nothing else: no
// script at all, no frame around them, forms only to the console.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// inProcess sends the console's calls to the API's handler in this
// process: through its authentication and interceptors, without a socket.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	r = r.Clone(r.Context())
	// The API logs its refusals with the caller's address: the browser's.
	r.RemoteAddr, _ = r.Context().Value(remoteAddrKey{}).(string)
	r.RequestURI = r.URL.RequestURI()
	t.h.ServeHTTP(rec, r)
	res := rec.Result()
	res.Request = r
	return res, nil
}

// remoteAddrKey carries the browser's address to the API's handlers.
type remoteAddrKey struct{}

// apiBase is the origin the in-process clients name; only the path is read.
const apiBase = "http://console.internal"

// session is what the cookie carries, sealed.
type session struct {
	Token   string `json:"t"`
	Expires int64  `json:"e"` // unix seconds
	CSRF    string `json:"c"`
}

const (
	sessionCookie = "pl_console"
	signInCookie  = "pl_console_signin" // the sign-in form's CSRF token, before there is a session
)

func (c *Console) seal(s session) string {
	b, _ := json.Marshal(s)
	nonce := make([]byte, c.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, b, []byte(sessionCookie)))
}

func (c *Console) open(v string) (session, bool) {
	var s session
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) < c.aead.NonceSize() {
		return s, false
	}
	plain, err := c.aead.Open(nil, b[:c.aead.NonceSize()], b[c.aead.NonceSize():], []byte(sessionCookie))
	if err != nil || json.Unmarshal(plain, &s) != nil || c.o.Now().Unix() >= s.Expires {
		return s, false
	}
	return s, true
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
}

// mayUse reports whether id may sign in to the console.
func (c *Console) mayUse(id auth.Identity) bool {
	return id.Role == auth.RoleAdmin || id.Role == auth.RoleSupport || c.o.Auth.Insecure()
}

// visit is one signed-in request.
type visit struct {
	c        *Console
	w        http.ResponseWriter
	r        *http.Request
	s        session
	id       auth.Identity
	ledger   pointledgerv1connect.LedgerServiceClient
	admin    pointledgerv1connect.AdminServiceClient
	budget   pointledgerv1connect.BudgetServiceClient
	webhooks pointledgerv1connect.WebhookServiceClient
	kinds    pointledgerv1connect.PointKindServiceClient
}

// signed runs h for a signed-in operator whose token still signs in, and,
// for a POST, whose form carries the session's CSRF token from this origin.
// Otherwise a GET goes to the sign-in page, and a POST is refused having
// called nothing.
func (c *Console) signed(h func(v *visit)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(sessionCookie)
		var s session
		ok := err == nil
		if ok {
			s, ok = c.open(ck.Value)
		}
		var id auth.Identity
		if ok {
			id, err = c.o.Auth.Authenticate("Bearer " + s.Token)
			ok = err == nil && c.mayUse(id)
		}
		if !ok {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && !sameOrigin(r) {
			http.Error(w, "a change must come from the console's own pages", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.CSRF)) != 1 {
			c.o.Log.InfoContext(r.Context(), "console: a change without its CSRF token refused", "path", r.URL.Path, "operator", id.Subject)
			http.Error(w, "the form's CSRF token is missing or wrong: reload the page", http.StatusForbidden)
			return
		}
		opts := connect.WithInterceptors(client.Bearer(s.Token))
		r = r.WithContext(context.WithValue(r.Context(), remoteAddrKey{}, r.RemoteAddr))
		h(&visit{
			c: c, w: w, r: r, s: s, id: id,
			ledger:   pointledgerv1connect.NewLedgerServiceClient(c.http, apiBase, opts),
			admin:    pointledgerv1connect.NewAdminServiceClient(c.http, apiBase, opts),
			budget:   pointledgerv1connect.NewBudgetServiceClient(c.http, apiBase, opts),
			webhooks: pointledgerv1connect.NewWebhookServiceClient(c.http, apiBase, opts),
			kinds:    pointledgerv1connect.NewPointKindServiceClient(c.http, apiBase, opts),
		})
	}
}

// sameOrigin: a browser's POST names its page's origin; one from another
// site is refused even before its CSRF token is looked at.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return r.Header.Get("Sec-Fetch-Site") != "cross-site" && origin != "null"
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// page is what every page's layout needs, and the page's own data.
type page struct {
	Title    string
	Operator string
	Role     string
	CSRF     string
	Error    *refusal
	Notice   string
	Data     any
}

// refusal is an API error as the page shows it.
type refusal struct {
	Code    string
	Reason  string
	Message string
}

func refusalOf(err error) *refusal {
	if err == nil {
		return nil
	}
	return &refusal{Code: connect.CodeOf(err).String(), Reason: string(client.ReasonOf(err)), Message: messageOf(err)}
}

func messageOf(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

func (v *visit) render(status int, name, title string, data any, failed error, notice string) {
	v.c.render(v.w, status, name, page{Title: title, Operator: v.id.Subject, Role: string(v.id.Role), CSRF: v.s.CSRF, Error: refusalOf(failed), Notice: notice, Data: data})
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages[name].ExecuteTemplate(w, "layout.html", p); err != nil {
		c.o.Log.Error("console: render", "page", name, "error", err)
	}
}

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	csrf := randomToken()
	http.SetCookie(w, c.cookie(r, signInCookie, csrf, 600))
	c.render(w, http.StatusOK, "signin", page{Title: "Sign in", CSRF: csrf})
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(signInCookie)
	if err != nil || !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(ck.Value)) != 1 {
		http.Error(w, "the sign-in form's CSRF token is missing or wrong: reload the page", http.StatusForbidden)
		return
	}
	id, err := c.o.Auth.Authenticate("Bearer " + r.PostFormValue("token"))
	if err != nil || !c.mayUse(id) {
		// Neither the token nor whose it is goes back to the page or the log.
		c.o.Log.InfoContext(r.Context(), "console: sign-in refused", "role", string(id.Role), "remote_addr", r.RemoteAddr)
		csrf := randomToken()
		http.SetCookie(w, c.cookie(r, signInCookie, csrf, 600))
		c.render(w, http.StatusUnauthorized, "signin", page{Title: "Sign in", CSRF: csrf,
			Error: &refusal{Code: "unauthenticated", Message: "this token cannot sign in: the console is for admin and support tokens"}})
		return
	}
	s := session{Token: r.PostFormValue("token"), Expires: c.o.Now().Add(c.o.SessionTTL).Unix(), CSRF: randomToken()}
	http.SetCookie(w, c.cookie(r, sessionCookie, c.seal(s), int(c.o.SessionTTL/time.Second)))
	http.SetCookie(w, c.cookie(r, signInCookie, "", -1))
	c.o.Log.InfoContext(r.Context(), "console: signed in", "operator", id.Subject, "role", string(id.Role), "remote_addr", r.RemoteAddr)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

func (c *Console) signOut(v *visit) {
	http.SetCookie(v.w, c.cookie(v.r, sessionCookie, "", -1))
	c.o.Log.InfoContext(v.r.Context(), "console: signed out", "operator", v.id.Subject)
	http.Redirect(v.w, v.r, Prefix+"signin", http.StatusSeeOther)
}

func (c *Console) home(v *visit) {
	v.render(http.StatusOK, "home", "Console", nil, nil, "")
}

// ctx bounds the API calls of one page.
func (v *visit) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(v.r.Context(), 30*time.Second)
}
