package tests

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// chromium returns Debian's chromium, skipping the test without it
// unless CONCORD_REQUIRE_CHROMIUM is set (make test sets it, and installs
// the package when it can).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CONCORD_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium is not installed (Debian: apt-get install chromium), and CONCORD_REQUIRE_CHROMIUM is set")
	}
	t.Skip("chromium is not installed (Debian: apt-get install chromium): the console's browser test does not run")
	return ""
}

// browser starts a headless chromium for the test, with the flags that
// keep it off the network (it may reach only what the test serves), and
// returns a context to drive it. Every request carries header.
func browser(t *testing.T, header map[string]any) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // root, in a container
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	// The browser is a process of the test's: its context ends it.
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(header)})
		return err
	}))
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshot keeps a picture of the page: in dir when given, else, when
// the test failed, under tests/artifacts for CI to keep.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	if dir == "" {
		if !t.Failed() {
			return
		}
		dir = filepath.Join("artifacts", t.Name())
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot of %s: %s", name, path)
}

// TestConsoleInBrowser runs the console of a real node in a real browser:
// the overview names the leader; the leases page shows a lease the test
// granted, with its metadata and key, and a countdown that moves, and
// drops the lease once it expires; an event the test causes appears in
// the event stream; and without the password the console gives nothing.
// CONCORD_CONSOLE_SCREENSHOTS=dir keeps a picture of each page there (the
// docs' pictures come from it).
func TestConsoleInBrowser(t *testing.T) {
	chromium(t) // skip early, before starting a node
	shots := os.Getenv("CONCORD_CONSOLE_SCREENSHOTS")
	const user, password = "operator", "console-test-secret"
	pwFile := filepath.Join(t.TempDir(), "console-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := startNode(t, nodeOpts{flags: []string{"--console-listen", addr, "--console-password-file", pwFile}})
	base := "http://" + addr
	waitConsole(t, base, user, password)

	// Without the password, or with a wrong one: 401 and nothing else.
	for _, auth := range []string{"", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":wrong")),
		"Basic " + base64.StdEncoding.EncodeToString([]byte("someone:"+password))} {
		for _, path := range []string{"/", "/leases", "/api/leases", "/api/events", "/keys?prefix=", "/assets/console.js"} {
			code, body, err := httpGet(base+path, auth)
			if err != nil || code != http.StatusUnauthorized || body != "" {
				t.Errorf("GET %s with %q: %d, %d bytes, %v; want 401 and nothing", path, auth, code, len(body), err)
			}
		}
	}

	c := connect(t, n.natsURL)
	var g struct {
		ID int64 `json:"id"`
	}
	const ttl = 6
	c.ok(subjects.LeaseGrant, map[string]any{"ttl": ttl, "metadata": map[string]any{"owner": "console-test"}}, &g)
	granted := time.Now()
	c.put("console.held", "by the lease", g.ID)
	// What the cluster holds is shown as text, never as markup: a key,
	// a value and lease metadata that would be elements if pasted.
	const attackKey, attackValue = `console.x"onmouseover="pwned=1`, `<img src=x onerror=pwned=1>`
	var attacker struct {
		ID int64 `json:"id"`
	}
	c.ok(subjects.LeaseGrant, map[string]any{"ttl": 120, "metadata": map[string]any{"owner": "</script><img src=x onerror=pwned=1>"}}, &attacker)
	c.put(attackKey, attackValue, attacker.ID)

	ctx := browser(t, map[string]any{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))})
	// do runs steps, each bounded; on failure it keeps a picture of the page.
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		if err := chromedp.Do(rctx, steps...); err != nil {
			screenshot(t, ctx, "", "failed")
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(what, selector string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		s, err := chromedp.Run(rctx, chromedp.Text(chromedp.CSS(selector)))
		if err != nil {
			screenshot(t, ctx, "", "failed")
			t.Fatalf("%s: %v", what, err)
		}
		return s
	}
	count := func(what, selector string) int {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		n, err := chromedp.Run(rctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", selector)))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return n
	}
	waitFor := func(what, js string, timeout time.Duration) {
		t.Helper()
		do(what, chromedp.Steps(func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Poll[bool](js, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))(ctx, tg)
			return chromedp.Void{}, err
		}))
	}
	// shownAsText checks that the page shows the attack's strings as
	// text, and made no element of them.
	shownAsText := func(page string, want ...string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		js := `document.querySelectorAll("img").length + " " + document.querySelectorAll("[onmouseover]").length + "|" + document.body.innerText`
		got, err := chromedp.Run(rctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		counts, text, _ := strings.Cut(got, "|")
		if counts != "0 0" {
			screenshot(t, ctx, "", "injected")
			t.Errorf("%s: the page made elements of the cluster's data (img, onmouseover: %s)", page, counts)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not show %q as text", page, w)
			}
		}
	}

	do("overview", chromedp.Navigate(base+"/"))
	if leader := text("the leader", "#leader"); leader != "n1" {
		t.Errorf("overview names leader %q, want n1", leader)
	}
	screenshot(t, ctx, shots, "overview")

	row := fmt.Sprintf(`tr[data-lease="%d"]`, g.ID)
	countdown := row + " td.countdown"
	do("the lease on the leases page", chromedp.Navigate(base+"/leases"), chromedp.WaitVisible(chromedp.CSS(row)))
	rowText := text("the lease's row", row)
	for _, want := range []string{strconv.FormatInt(g.ID, 10), `"owner":"console-test"`, "console.held"} {
		if !strings.Contains(rowText, want) {
			t.Errorf("the lease's row %q lacks %q", rowText, want)
		}
	}
	attackRow := fmt.Sprintf(`tr[data-lease="%d"]`, attacker.ID)
	do("the attacker's lease", chromedp.WaitVisible(chromedp.CSS(attackRow)))
	shownAsText("the leases page", `</script><img src=x onerror=pwned=1>`, attackKey)
	first := text("the countdown", countdown)
	if shots != "" {
		c.ok(subjects.LeaseRevoke, map[string]any{"id": attacker.ID}, nil) // not in the docs' picture
		waitFor("the attacker's lease leaves", fmt.Sprintf("document.querySelector(%q) === null", attackRow), 10*time.Second)
	}
	screenshot(t, ctx, shots, "leases")
	time.Sleep(1500 * time.Millisecond)
	later := text("the countdown again", countdown)
	firstS, err1 := strconv.ParseFloat(strings.TrimSuffix(first, " s"), 64)
	laterS, err2 := strconv.ParseFloat(strings.TrimSuffix(later, " s"), 64)
	if err1 != nil || err2 != nil || !(laterS < firstS) || firstS > ttl {
		t.Errorf("countdown went from %q to %q in 1.5 s: want it to fall, from at most %d s", first, later, ttl)
	}
	// Gone from the page once expired: the expiry comes no sooner than
	// the ttl (the page may not drop it before), and the page drops it
	// within a poll of the expiry.
	waitFor("the lease leaves the page when it expires", fmt.Sprintf("document.querySelector(%q) === null", row), ttl*time.Second+20*time.Second)
	if gone := time.Since(granted); gone < ttl*time.Second {
		t.Errorf("the lease left the page %v after its grant, before its ttl of %d s", gone, ttl)
	}

	do("the events page", chromedp.Navigate(base+"/events?prefix=console."))
	waitFor("the event stream opens", "document.getElementById('stream-state').textContent.startsWith('Watching')", 20*time.Second)
	c.put("console.event", map[string]any{"seen": true}, 0)
	do("the event appears", chromedp.WaitVisible(chromedp.CSS(`tr[data-key="console.event"]`)))
	if eventRow := text("the event's row", `tr[data-key="console.event"]`); !strings.Contains(eventRow, "put") || !strings.Contains(eventRow, `{"seen":true}`) {
		t.Errorf("event row %q: want the put and its value", eventRow)
	}
	// The expiry's delete came before the stream opened: not shown.
	if rows := count("the events", "#events tbody tr"); rows != 1 {
		t.Errorf("the stream shows %d events, want the 1 made after it opened", rows)
	}
	screenshot(t, ctx, shots, "events")
	if shots == "" {
		c.put(attackKey, attackValue, 0)
		waitFor("the attack's event appears", fmt.Sprintf("[...document.querySelectorAll('#events tbody tr')].some(tr => tr.dataset.key === %q)", attackKey), 20*time.Second)
		shownAsText("the events page", attackKey, attackValue)
		do("the keys page", chromedp.Navigate(base+"/keys?prefix=console."), chromedp.WaitVisible(chromedp.CSS("#keys")))
		shownAsText("the keys page", attackKey, attackValue)
		do("the attack key's page", chromedp.Navigate(base+"/key?key="+url.QueryEscape(attackKey)), chromedp.WaitVisible(chromedp.CSS("#history")))
		shownAsText("the key page", attackKey, attackValue)
	}

	do("a key's history", chromedp.Navigate(base+"/key?key=console.held"), chromedp.WaitVisible(chromedp.CSS("#history")))
	if n := count("the history", "#history tbody tr"); n != 2 {
		t.Errorf("console.held's history shows %d changes, want its put and its delete by the expiry", n)
	}
	screenshot(t, ctx, shots, "key")
	screenshot(t, ctx, "", "last") // on failure only
}

// waitConsole waits until the console answers.
func waitConsole(t *testing.T, base, user, password string) {
	t.Helper()
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		if code, _, err := httpGet(base+"/api/leases", auth); err != nil || code != http.StatusOK {
			return fmt.Errorf("console answered %d, %v", code, err)
		}
		return nil
	})
}

// sseEvent is one event of the console's stream.
type sseEvent struct{ id, data string }

// openEvents opens the console's event stream for prefix, resuming after
// lastID when it is set, and returns the answer's status and, on 200, the
// events as they come; closing the returned func ends the stream.
func openEvents(t *testing.T, base, auth, prefix, lastID string) (int, <-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events?prefix="+url.QueryEscape(prefix), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("open the event stream: %v", err)
	}
	stop := func() { cancel(); resp.Body.Close() }
	t.Cleanup(stop)
	if resp.StatusCode != http.StatusOK {
		stop()
		return resp.StatusCode, nil, stop
	}
	events := make(chan sseEvent, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.data != "":
				events <- ev
				ev = sseEvent{}
			}
		}
	}()
	return resp.StatusCode, events, stop
}

// The console's event stream resumes where a page's browser says it
// left off (Last-Event-ID), in the middle of a revision too; it serves at
// most 16 streams at once, and a stream whose page went away frees its
// place.
func TestConsoleEventStream(t *testing.T) {
	t.Parallel()
	const user, password = "operator", "stream-test-secret"
	pwFile := filepath.Join(t.TempDir(), "console-password")
	if err := os.WriteFile(pwFile, []byte(password), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := startNode(t, nodeOpts{flags: []string{"--console-listen", addr, "--console-user", user, "--console-password-file", pwFile}})
	base, auth := "http://"+addr, "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	waitConsole(t, base, user, password)
	c := connect(t, n.natsURL)

	c.put("resume.a", 1, 0)
	var txn schema.KVTxnReply
	c.ok(subjects.KVTxn, map[string]any{"success": []map[string]any{
		{"put": map[string]any{"key": "resume.b", "value": 2}},
		{"put": map[string]any{"key": "resume.c", "value": 3}},
	}}, &txn)
	last := c.put("resume.d", 4, 0)

	// The page had the txn's first put: the stream goes on with its
	// second, then the put after it, and nothing before.
	code, events, stopResumed := openEvents(t, base, auth, "resume.", fmt.Sprintf("%d.0", txn.Revision))
	if code != http.StatusOK {
		t.Fatalf("resume: %d", code)
	}
	for _, want := range []struct {
		id, key string
	}{{fmt.Sprintf("%d.1", txn.Revision), "resume.c"}, {fmt.Sprintf("%d.0", last), "resume.d"}} {
		select {
		case ev, ok := <-events:
			var e schema.Event
			if !ok || json.Unmarshal([]byte(ev.data), &e) != nil || ev.id != want.id || e.Key != want.key {
				t.Fatalf("resumed stream: %+v (open %v), want id %s for %s", ev, ok, want.id, want.key)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("resumed stream: no event %s within 20 s", want.id)
		}
	}

	stopResumed()

	// A page opened when the compaction floor is the present revision
	// streams what comes next: its watch must not start below the floor.
	var compacted schema.KVCompactReply
	c.ok(subjects.KVCompact, map[string]any{"revision": last}, &compacted)
	if compacted.CompactRevision != last {
		t.Fatalf("compact to %d: floor %d", last, compacted.CompactRevision)
	}
	code, events, stopFresh := openEvents(t, base, auth, "fresh.", "")
	if code != http.StatusOK {
		t.Fatalf("a page at the floor: %d", code)
	}
	next := c.put("fresh.a", 5, 0)
	select {
	case ev, ok := <-events:
		var e schema.Event
		if !ok || json.Unmarshal([]byte(ev.data), &e) != nil || ev.id != fmt.Sprintf("%d.0", next) || e.Key != "fresh.a" {
			t.Fatalf("stream opened at the floor: %+v (open %v), want id %d.0 for fresh.a", ev, ok, next)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("stream opened at the floor: no event %d.0 within 20 s", next)
	}
	stopFresh()

	// Sixteen streams at once, and no more.
	var stops []func()
	for i := 0; ; i++ {
		code, _, stop := openEvents(t, base, auth, "bound.", "")
		if code == http.StatusServiceUnavailable {
			if i != 16 {
				t.Fatalf("stream %d refused, want the 17th", i+1)
			}
			break
		}
		if code != http.StatusOK || i == 16 {
			t.Fatalf("stream %d: %d, want 200 up to 16 and 503 after", i+1, code)
		}
		stops = append(stops, stop)
	}
	// A page that goes away frees its place.
	stops[0]()
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		code, _, stop := openEvents(t, base, auth, "bound.", "")
		stop()
		if code != http.StatusOK {
			return fmt.Errorf("a stream after one closed: %d", code)
		}
		return nil
	})
}
