package console

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// get asks h for path with host in the Host header and the given
// Authorization (none when "").
func get(h http.Handler, host, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = host
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// Without a password, only requests addressed to a loopback name are
// answered: a page elsewhere that points its own name at 127.0.0.1 (DNS
// rebinding) gets nothing.
func TestConsoleWithoutPasswordAnswersLoopbackNamesOnly(t *testing.T) {
	h := Handler(Options{})
	for _, host := range []string{"127.0.0.1:8080", "localhost:8080", "LOCALHOST", "localhost.:1", "[::1]:8080", "127.1.2.3"} {
		if w := get(h, host, "/assets/console.css", ""); w.Code != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", host, w.Code)
		}
	}
	for _, host := range []string{"evil.example:8080", "evil.example", "localhost.evil.example", "10.0.0.1:8080", "[::2]:80", ""} {
		w := get(h, host, "/assets/console.css", "")
		if w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "body {") {
			t.Errorf("Host %q: %d, %d bytes; want 403 and no page", host, w.Code, w.Body.Len())
		}
	}
}

// With a password, the right user and password get in, and nothing else
// does, whatever the Host.
func TestConsoleWithPasswordWantsBoth(t *testing.T) {
	h := Handler(Options{User: "operator", Password: "s3cret"})
	if w := get(h, "console.example:8443", "/assets/console.css", basic("operator", "s3cret")); w.Code != http.StatusOK {
		t.Fatalf("right credentials: %d, want 200", w.Code)
	}
	for _, auth := range []string{"", basic("operator", "wrong"), basic("someone", "s3cret"), basic("operator", "s3cret-and-more"), basic("", ""), "Bearer s3cret"} {
		w := get(h, "127.0.0.1:8443", "/assets/console.css", auth)
		if w.Code != http.StatusUnauthorized || w.Body.Len() != 0 || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %d, %d bytes; want 401 with a challenge and nothing else", auth, w.Code, w.Body.Len())
		}
	}
}

// Past maxStreams open event streams, another is refused with 503 before
// it asks the cluster for anything.
func TestConsoleBoundsEventStreams(t *testing.T) {
	c := &console{o: Options{}, streams: make(chan struct{}, maxStreams)}
	for range maxStreams {
		c.streams <- struct{}{}
	}
	w := httptest.NewRecorder()
	c.apiEvents(w, httptest.NewRequest(http.MethodGet, "/api/events", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "event streams are open") {
		t.Fatalf("stream past the bound: %d %q, want 503 saying why", w.Code, w.Body.String())
	}
}

func TestEventIDs(t *testing.T) {
	for _, s := range []string{"", "12", "12.", ".1", "0.0", "-1.0", "12.-1", "12.1.1", "x.1", "1.x"} {
		if id, ok := parseEventID(s); ok {
			t.Errorf("parseEventID(%q) = %v, want refused", s, id)
		}
	}
	id, ok := parseEventID("12.3")
	if !ok || id != (eventID{rev: 12, op: 3}) || id.String() != "12.3" {
		t.Fatalf("parseEventID(12.3) = %v %v", id, ok)
	}
	for _, later := range []eventID{{12, 4}, {13, 0}} {
		if !id.before(later) || later.before(id) {
			t.Errorf("%v should come before %v", id, later)
		}
	}
	if id.before(id) || id.before(eventID{12, 2}) || id.before(eventID{11, 9}) {
		t.Errorf("%v comes before itself or an earlier event", id)
	}
}

func TestReadableJSON(t *testing.T) {
	for in, want := range map[string]string{
		`"\u003cimg src=x\u003e \u0026"`:  `"<img src=x> &"`,
		`{"a":"\u003C","b":[1,"\u003e"]}`: `{"a":"<","b":[1,">"]}`,
		`"\\u003c"`:                       `"\\u003c"`, // a backslash, then the text u003c
		`"\\\u003c"`:                      `"\\<"`,
		`"\u00e9 \n \""`:                  `"\u00e9 \n \""`, // other escapes stay
		`12`:                              `12`,
		`"\u003`:                          `"\u003`, // cut short: left as it is
	} {
		if got := readableJSON([]byte(in)); got != want {
			t.Errorf("readableJSON(%s) = %s, want %s", in, got, want)
		}
	}
}
