package check

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// repoRoot is the repository's root, two levels above this module.
var repoRoot, _ = filepath.Abs(filepath.Join("..", ".."))

// concordBin and podstartBin are built once for the whole run from the
// main module.
var concordBin, podstartBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "concord-deploy-check-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	concordBin = filepath.Join(dir, "concord")
	podstartBin = filepath.Join(dir, "podstart")
	for bin, pkg := range map[string]string{concordBin: "./cmd/concord", podstartBin: "./deploy/podstart"} {
		build := newChild(nil, 10*time.Minute, "go", "build", "-o", bin, pkg)
		build.cmd.Dir = repoRoot
		build.cmd.Stdout, build.cmd.Stderr = os.Stdout, os.Stderr
		if err := build.run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", pkg, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort asks the kernel for a free loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// checkFor polls f until it returns nil or timeout passes.
func checkFor(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// localizer turns the command line of a node meant for its own host (a
// container or a pod) into one that runs on this machine beside the others:
// every host:port of a known host becomes 127.0.0.1 and a free port of its
// own (the same one wherever that host:port appears), 0.0.0.0 stands for
// the node's own host, and the data directory moves to a temporary one. A
// host:port naming an unknown host fails the test: the file refers to
// something that is not part of the deployment.
type localizer struct {
	t     *testing.T
	ports map[string]int // "host:port" -> local port
	// hostOf maps every name a node is reached by (a service name, a pod's
	// DNS names) to the node's canonical name.
	hostOf map[string]string
}

func newLocalizer(t *testing.T) *localizer {
	return &localizer{t: t, ports: map[string]int{}, hostOf: map[string]string{}}
}

// addHost registers a node and the names it is known by.
func (l *localizer) addHost(node string, names ...string) {
	l.hostOf[node] = node
	for _, n := range names {
		l.hostOf[n] = node
	}
}

// hostPort matches host:port, with an optional scheme before it.
var hostPort = regexp.MustCompile(`([A-Za-z0-9][A-Za-z0-9.-]*):([0-9]+)`)

// addr maps one host:port as seen from node self.
func (l *localizer) addr(self, host, port string) string {
	l.t.Helper()
	node := l.hostOf[host]
	if host == "0.0.0.0" {
		node = self
	}
	if node == "" {
		l.t.Fatalf("node %s: %s:%s names a host that is not one of the nodes %v", self, host, port, keys(l.hostOf))
	}
	key := node + ":" + port
	p, ok := l.ports[key]
	if !ok {
		p = freePort(l.t)
		l.ports[key] = p
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// args rewrites a node's arguments. dataDir is the directory the node's
// volume is mounted at, localDir its stand-in here.
func (l *localizer) args(self string, args []string, dataDir, localDir string) []string {
	l.t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		name, value, hasValue := strings.Cut(a, "=")
		if hasValue && strings.HasPrefix(name, "-") && (value == dataDir || strings.HasPrefix(value, dataDir+"/")) {
			out[i] = name + "=" + localDir + strings.TrimPrefix(value, dataDir)
			continue
		}
		if a == dataDir || strings.HasPrefix(a, dataDir+"/") {
			out[i] = localDir + strings.TrimPrefix(a, dataDir)
			continue
		}
		out[i] = hostPort.ReplaceAllStringFunc(a, func(m string) string {
			sub := hostPort.FindStringSubmatch(m)
			return l.addr(self, sub[1], sub[2])
		})
	}
	return out
}

// local returns the local address that host:port of node became.
func (l *localizer) local(node string, port int) string {
	l.t.Helper()
	p, ok := l.ports[node+":"+strconv.Itoa(port)]
	if !ok {
		l.t.Fatalf("no local address for %s:%d", node, port)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// proc is one node running as a local process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs argv (argv[0] is the binary) with extra environment and logs
// to a file; the process is killed when the test ends, and its log is shown
// if the test failed.
func start(t *testing.T, name string, argv []string, env ...string) *proc {
	t.Helper()
	return startAs(t, name, argv, nil, env...)
}

// startAs is start as the user cred names (nil: as this process).
func startAs(t *testing.T, name string, argv []string, cred *syscall.Credential, env ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	c := newChild(t, 0, argv[0], argv[1:]...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	c.cmd.SysProcAttr.Credential = cred
	if err := c.start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: c.cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		c.kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("%s: %s\n%s", name, strings.Join(argv, " "), strings.Join(lines, "\n"))
		}
	})
	return p
}

// running fails the test if the process has exited.
func (p *proc) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited: %v", p.name, p.cmd.ProcessState)
	default:
	}
}

// member is the part of a cluster.status member the checks read.
type member struct {
	ID        string `json:"id"`
	Address   string `json:"address"`
	Suffrage  string `json:"suffrage"`
	Reachable bool   `json:"reachable"`
}

// checkCluster waits until the cluster reached through natsURL has exactly
// the voters ids, all reachable; then every node must answer /healthz and
// /readyz with 200 on its metrics address and grant a lease through its
// own NATS URL.
func checkCluster(t *testing.T, procs []*proc, ids []string, natsURLs, metricsAddrs []string) {
	t.Helper()
	checkFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		for _, p := range procs {
			p.running(t)
		}
		nc, err := nats.Connect(strings.Join(natsURLs, ","), nats.Timeout(2*time.Second))
		if err != nil {
			return err
		}
		defer nc.Close()
		msg, err := nc.Request("concord.cluster.status", []byte(`{}`), 2*time.Second)
		if err != nil {
			return err
		}
		var st struct {
			Leader  string   `json:"leader"`
			Members []member `json:"members"`
		}
		if err := json.Unmarshal(msg.Data, &st); err != nil || msg.Header.Get("Nats-Service-Error-Code") != "" {
			return fmt.Errorf("cluster.status: %s", msg.Data)
		}
		var got []string
		for _, m := range st.Members {
			if m.Suffrage != "voter" || !m.Reachable {
				return fmt.Errorf("member %+v is not a reachable voter", m)
			}
			got = append(got, m.ID)
		}
		if strings.Join(sorted(got), ",") != strings.Join(sorted(ids), ",") {
			return fmt.Errorf("members %v, want %v", got, ids)
		}
		return nil
	})
	for i, addr := range metricsAddrs {
		for _, path := range []string{"/healthz", "/readyz"} {
			checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
				resp, err := http.Get("http://" + addr + path)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("%s: GET %s: %s", ids[i], path, resp.Status)
				}
				return nil
			})
		}
	}
	for i, url := range natsURLs {
		c, err := nats.Connect(url, nats.Timeout(2*time.Second))
		if err != nil {
			t.Fatalf("%s: %v", ids[i], err)
		}
		msg, err := c.Request("concord.lease.grant", []byte(`{"ttl":30}`), 5*time.Second)
		c.Close()
		if err != nil {
			t.Fatalf("%s: lease.grant: %v", ids[i], err)
		}
		var g struct {
			ID  int64 `json:"id"`
			TTL int64 `json:"ttl"`
		}
		if err := json.Unmarshal(msg.Data, &g); err != nil || g.ID < 1 || g.TTL != 30 {
			t.Fatalf("%s: lease.grant replied %s", ids[i], msg.Data)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// flagValue returns the value of --name (or -name) in args, in either the
// --name=value or the --name value form, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		n, v, eq := strings.Cut(a, "=")
		if n != "-"+name && n != "--"+name {
			continue
		}
		if eq {
			return v, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
		return "", true
	}
	return "", false
}

// hasFlag reports whether the boolean flag --name is set in args.
func hasFlag(args []string, name string) bool {
	v, ok := flagValue(args, name)
	if !ok {
		return false
	}
	for _, a := range args {
		if a == "-"+name || a == "--"+name {
			return true
		}
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// portOf returns the port of a host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return n
}
