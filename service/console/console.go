package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

//go:embed assets
var assets embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"raw":     func(b json.RawMessage) string { return string(b) },
	"seconds": func(ms int64) string { return fmt.Sprintf("%.1f s", float64(ms)/1000) },
	"tenant": func(t string) string {
		if t == "" {
			return "- (Concord's own account)"
		}
		return t
	},
}).ParseFS(assets, "assets/*.html"))

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
	Log     *slog.Logger
}

// pageLimit bounds the records one page shows: the console is for
// looking, not for dumping a keyspace.
const pageLimit = 500

// leaseKeysLimit bounds the leases whose keys a lease listing reads, one
// lease.info request each.
const leaseKeysLimit = 50

// Handler returns the console's HTTP handler.
func Handler(o Options) http.Handler {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c := &console{o: o}
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

type console struct{ o Options }

// guard checks the credentials, when there are any, and sets the headers
// every answer carries: nothing from elsewhere runs in these pages, and
// no other site frames them.
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.o.Password != "" {
			user, pass, ok := r.BasicAuth()
			// Both compared, always, so the time taken says nothing.
			userOK := subtle.ConstantTimeCompare([]byte(user), []byte(c.o.User)) == 1
			passOK := subtle.ConstantTimeCompare([]byte(pass), []byte(c.o.Password)) == 1
			if !ok || !userOK || !passOK {
				w.Header().Set("WWW-Authenticate", `Basic realm="concord console", charset="UTF-8"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
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
	st, err := c.o.Client.Status(ctx, schema.ClusterStatusRequest{})
	d.Status = st
	if err == nil {
		d.Tenants, err = c.o.Client.Tenants(ctx, "")
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
	d.Reply = reply
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
// leaseKeysLimit that have any.
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
		withKeys := 0
		for i := range out.Leases {
			l := &out.Leases[i]
			if l.KeyCount == 0 || withKeys == leaseKeysLimit {
				continue
			}
			withKeys++
			info, err := c.o.Client.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: l.ID, Keys: true})
			if err == nil {
				l.Keys = info.Keys
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		out.Error = err.Error()
		w.WriteHeader(http.StatusBadGateway)
	}
	_ = json.NewEncoder(w).Encode(out)
}

// apiEvents streams the events of the keys under ?prefix= (every key
// when empty) as server-sent events, one JSON event each, from the
// moment it is opened, until the page goes away.
func (c *console) apiEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	prefix := r.URL.Query().Get("prefix")
	ctx := r.Context()
	// From now: the revision the cluster is at when the page opens.
	rctx, cancel := c.ctx(r)
	now, err := c.o.Client.Get(rctx, schema.KVGetRequest{Prefix: &prefix, CountOnly: true})
	cancel()
	if err != nil {
		http.Error(w, "read the revision: "+err.Error(), http.StatusBadGateway)
		return
	}
	watcher, err := c.o.Client.Watch(ctx, prefix, true, now.Revision)
	if err != nil {
		http.Error(w, "watch: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": watching\n\n")
	flusher.Flush()
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			fmt.Fprint(w, ": still watching\n\n")
		case ev, ok := <-watcher.Events():
			if !ok {
				msg := "the watch ended"
				if err := watcher.Err(); err != nil {
					msg = err.Error()
				}
				fmt.Fprintf(w, "event: end\ndata: %s\n\n", strings.ReplaceAll(msg, "\n", " "))
				flusher.Flush()
				return
			}
			data, _ := json.Marshal(ev)
			fmt.Fprintf(w, "data: %s\n\n", data)
		}
		flusher.Flush()
	}
}
