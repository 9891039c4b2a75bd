package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"raw":     readableJSON,
	"seconds": func(ms int64) string { return fmt.Sprintf("%.1f s", float64(ms)/1000) },
	"tenant": func(t string) string {
		if t == "" {
			return "- (Concord's own account)"
		}
		return t
	},
}).ParseFS(assets, "assets/*.html"))

// readableJSON returns JSON as a person reads it. Go's encoder, which
// most clients use, writes <, > and & inside strings as \u003c, \u003e
// and \u0026: the same JSON, but a value "<b>" would show as
// "\u003cb\u003e". The template escapes the page's HTML itself.
func readableJSON(b json.RawMessage) string {
	out := make([]byte, 0, len(b))
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			inString = !inString
		case inString && c == '\\' && i+1 < len(b):
			if b[i+1] == 'u' && i+6 <= len(b) {
				if r, ok := htmlEscapes[strings.ToLower(string(b[i+2:i+6]))]; ok {
					out = append(out, r)
					i += 5
					continue
				}
			}
			out = append(out, c, b[i+1]) // an escape, kept whole: \\ is not the start of another
			i++
			continue
		}
		out = append(out, c)
	}
	return string(out)
}

// htmlEscapes are the \u escapes Go's JSON encoder writes for HTML.
var htmlEscapes = map[string]byte{"003c": '<', "003e": '>', "0026": '&'}

// Options configure the console.
type Options struct {
	// Client reaches the cluster; the console only reads through it.
	Client *client.Client
	// NodeID names the node serving the console.
	NodeID string
	// User and Password, when Password is set, are the HTTP Basic
	// credentials every request must carry; a request without them gets
	// 401 and nothing else.
	User, Password string
	// Timeout bounds each request to the cluster.
	Timeout time.Duration
	// Log gets the console's warnings; slog.Default() when nil.
	Log *slog.Logger
}

// pageLimit bounds the records one page shows: the console is for
// looking, not for dumping a keyspace.
const pageLimit = 500

// leaseKeysLimit bounds the leases whose keys a lease listing reads, one
// lease.info request each, and leaseKeysShown the keys of one lease it
// reads: lease.info returns every key, and a page polled every second
// must not make the leader list a lease's hundred thousand keys. A lease
// with more shows their count.
const (
	leaseKeysLimit   = 50
	leaseKeysShown   = 20
	leaseKeysReaders = 8
)

// maxStreams bounds the event streams open at once, each a watch on the
// cluster; streamWriteTimeout is how long one write to a page may take
// before the stream is given up: a page that stops reading must not hold
// its watch for ever.
const (
	maxStreams         = 16
	streamWriteTimeout = 10 * time.Second
)

// Handler returns the console's HTTP handler.
func Handler(o Options) http.Handler {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &console{o: o, streams: make(chan struct{}, maxStreams)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /leases", c.page("leases", nil))
	mux.HandleFunc("GET /keys", c.keys)
	mux.HandleFunc("GET /key", c.key)
	mux.HandleFunc("GET /events", c.page("events", func(r *http.Request) any { return r.URL.Query().Get("prefix") }))
	mux.HandleFunc("GET /api/leases", c.apiLeases)
	mux.HandleFunc("GET /api/events", c.apiEvents)
	mux.Handle("GET /assets/", http.FileServerFS(assets))
	return c.guard(mux)
}

type console struct {
	o       Options
	streams chan struct{} // a token per open event stream
}

// guard checks the credentials, when there are any, and sets the headers
// every answer carries: nothing from elsewhere runs in these pages, and
// no other site frames them.
//
// A console without a password listens on loopback only, and answers
// only requests addressed to a loopback name: any web page the operator
// opens could otherwise point a name of its own at 127.0.0.1 (DNS
// rebinding) and read the console as its own origin. With a password the
// browser holds the credentials for the console's origin alone.
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.o.Password != "" {
			user, pass, ok := r.BasicAuth()
			// Both compared, always, as digests of one length, so the
			// time taken says nothing of either, not even its length.
			userOK, passOK := sameSecret(user, c.o.User), sameSecret(pass, c.o.Password)
			if !ok || !userOK || !passOK {
				w.Header().Set("WWW-Authenticate", `Basic realm="concord console", charset="UTF-8"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		} else if !LoopbackHost(r.Host) {
			http.Error(w, fmt.Sprintf("the console has no password, so it answers only requests addressed to localhost or a loopback address, not to %q", r.Host), http.StatusForbidden)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// sameSecret compares a given secret with the expected one in a time
// that depends on neither.
func sameSecret(given, want string) bool {
	g, w := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// LoopbackHost reports whether host (a name or address, with or without
// a port) is localhost or a loopback address.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// view is what every page template gets.
type view struct {
	Page   string
	NodeID string
	Data   any
	Err    string
}

func (c *console) render(w http.ResponseWriter, page string, data any, err error) {
	v := view{Page: page, NodeID: c.o.NodeID, Data: data}
	if err != nil {
		v.Err = err.Error()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, page+".html", v); err != nil {
		c.o.Log.Warn("console: render a page", "page", page, "err", err)
	}
}

func (c *console) page(name string, data func(*http.Request) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var d any
		if data != nil {
			d = data(r)
		}
		c.render(w, name, d, nil)
	}
}

func (c *console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), c.o.Timeout)
}

// overviewData is the overview page: the cluster's status and the
// tenants' use.
type overviewData struct {
	Status  *schema.ClusterStatusReply
	Tenants *schema.ClusterTenantsReply
}

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	var d overviewData
	// A failed request's reply is not shown: its zeros would read as
	// the cluster's state.
	st, err := c.o.Client.Status(ctx, schema.ClusterStatusRequest{})
	if err == nil {
		d.Status = st
		if tenants, terr := c.o.Client.Tenants(ctx, ""); terr == nil {
			d.Tenants = tenants
		} else {
			err = terr
		}
	}
	c.render(w, "overview", d, err)
}

// keysData is the keys page: the keys under Prefix.
type keysData struct {
	Prefix string
	Reply  *schema.KVGetReply
}

func (c *console) keys(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	d := keysData{Prefix: r.URL.Query().Get("prefix")}
	reply, err := c.o.Client.Get(ctx, schema.KVGetRequest{Prefix: &d.Prefix, Limit: pageLimit})
	if err == nil {
		d.Reply = reply
	}
	c.render(w, "keys", d, err)
}

// keyData is the key page: one key as it is, and its history.
type keyData struct {
	Key     string
	KV      *schema.KeyValue
	History *schema.KVHistoryReply
}

func (c *console) key(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	d := keyData{Key: r.URL.Query().Get("key")}
	var err error
	if d.Key == "" {
		err = errors.New("no key given: open a key from the keys page")
	} else {
		d.KV, err = c.o.Client.GetKey(ctx, d.Key)
		if errors.Is(err, client.ErrKeyNotFound) {
			d.KV, err = nil, nil // its history may still hold it
		}
		if err == nil {
			d.History, err = c.o.Client.History(ctx, d.Key, client.NewestFirst(), client.HistoryLimit(pageLimit))
		}
	}
	c.render(w, "key", d, err)
}

// leasesReply is /api/leases: the leases, with the keys of the first
// leaseKeysLimit that have some and at most leaseKeysShown.
type leasesReply struct {
	Leases []schema.LeaseInfo `json:"leases"`
	More   bool               `json:"more"`
	Error  string             `json:"error,omitempty"`
}

func (c *console) apiLeases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	var out leasesReply
	list, err := c.o.Client.LeaseList(ctx, schema.LeaseListRequest{IncludeAnonymous: true, Limit: pageLimit})
	if err == nil {
		out.Leases, out.More = list.Leases, list.More
		c.readLeaseKeys(ctx, out.Leases)
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		out.Error = err.Error()
		w.WriteHeader(http.StatusBadGateway)
	}
	_ = json.NewEncoder(w).Encode(out)
}

// readLeaseKeys fills in the keys of the first leaseKeysLimit leases that
// have some and at most leaseKeysShown, leaseKeysReaders requests at a
// time: one after another they would cost the page a round trip each. A
// lease whose keys cannot be read is shown without them.
func (c *console) readLeaseKeys(ctx context.Context, leases []schema.LeaseInfo) {
	readers := make(chan struct{}, leaseKeysReaders)
	var wg sync.WaitGroup
	withKeys := 0
	for i := range leases {
		l := &leases[i]
		if l.KeyCount == 0 || l.KeyCount > leaseKeysShown || withKeys == leaseKeysLimit {
			continue
		}
		withKeys++
		readers <- struct{}{}
		wg.Go(func() {
			defer func() { <-readers }()
			if info, err := c.o.Client.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: l.ID, Keys: true}); err == nil {
				l.Keys = info.Keys
			}
		})
	}
	wg.Wait()
}

// apiEvents streams the events of the keys under ?prefix= (every key
// when empty) as server-sent events, one JSON event each, from the
// moment it is opened, until the page goes away. Each event's id is its
// revision and op index, so a browser that reconnects (it sends the last
// id as Last-Event-ID) resumes after the last event it got, with no gap.
func (c *console) apiEvents(w http.ResponseWriter, r *http.Request) {
	select {
	case c.streams <- struct{}{}:
		defer func() { <-c.streams }()
	default:
		http.Error(w, fmt.Sprintf("%d event streams are open, the most this console serves: close an events page", maxStreams), http.StatusServiceUnavailable)
		return
	}
	prefix := r.URL.Query().Get("prefix")
	ctx := r.Context()
	after, resumed := parseEventID(r.Header.Get("Last-Event-ID"))
	if !resumed {
		// From now: the revision the cluster is at when the page opens.
		rctx, cancel := c.ctx(r)
		now, err := c.o.Client.Get(rctx, schema.KVGetRequest{Prefix: &prefix, CountOnly: true})
		cancel()
		if err != nil {
			http.Error(w, "read the revision: "+err.Error(), http.StatusBadGateway)
			return
		}
		after = eventID{rev: now.Revision, op: math.MaxInt32} // none of that revision's ops
	}
	// The watch starts after a whole revision: after.rev itself when the
	// page wants none of its ops, which keeps a page opened at the
	// compaction floor (a compaction to the present, a tenant just moved
	// in) from asking for what is compacted. Otherwise after the revision
	// before, and the ops the page already has are skipped below.
	from := after.rev
	if after.op != math.MaxInt32 {
		from = max(after.rev-1, 0)
	}
	watcher, err := c.o.Client.Watch(ctx, prefix, true, from)
	if err != nil {
		http.Error(w, "watch: "+err.Error(), http.StatusBadGateway)
		return
	}
	rc := http.NewResponseController(w)
	send := func(format string, args ...any) error {
		if err := rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		return rc.Flush()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if send(": watching\n\n") != nil {
		return
	}
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			err = send(": still watching\n\n")
		case ev, ok := <-watcher.Events():
			if !ok {
				msg := "the watch ended"
				if err := watcher.Err(); err != nil {
					msg = err.Error()
				}
				_ = send("event: end\ndata: %s\n\n", strings.ReplaceAll(msg, "\n", " "))
				return
			}
			id := eventID{rev: ev.Revision, op: ev.OpIndex}
			if !after.before(id) {
				continue
			}
			data, _ := json.Marshal(ev)
			err = send("id: %s\ndata: %s\n\n", id, data)
		}
		if err != nil {
			return // the page stopped reading; its watch ends with ctx
		}
	}
}

// eventID names one event of the stream: its revision and op index.
type eventID struct {
	rev int64
	op  int
}

func (e eventID) String() string { return fmt.Sprintf("%d.%d", e.rev, e.op) }

// before reports whether e comes before o in the stream's order.
func (e eventID) before(o eventID) bool {
	return e.rev < o.rev || e.rev == o.rev && e.op < o.op
}

// parseEventID reads a Last-Event-ID: "<revision>.<op index>" as sent.
func parseEventID(s string) (eventID, bool) {
	rev, op, ok := strings.Cut(s, ".")
	r, err1 := strconv.ParseInt(rev, 10, 64)
	o, err2 := strconv.Atoi(op)
	if !ok || err1 != nil || err2 != nil || r < 1 || o < 0 {
		return eventID{}, false
	}
	return eventID{rev: r, op: o}, true
}
